/* matmul.c: the one generic matmul driver: argument checks, ISA table choice, scratch planning and
 * the GEMM / GEMV loops that hand tiles to the ISA micro-kernels (matmul_kern.h).
 *
 * GEMM (n_tok >= GEMV_MAX_TOK): tasks are tiles of TASK_OUT outputs x mb tokens. A task walks the
 * input dimension in blocks of KC, packs its W rows for that block once (dequantized f32 panels, or
 * int8 records) and sweeps its tokens with the mr x nr micro-kernel, which keeps the running sums in
 * Y between blocks. Each output element is owned by one task and summed in k order: the result does
 * not depend on the number of threads. GEMV (decode): tasks are blocks of rows; each row is read once
 * and dotted with every token. Nothing here allocates after ctx_open.
 * BF16 path: X is rounded to bf16 once per call (in the int8 path's X area); the same loop with
 * tasks of BF16_TASK_OUT outputs, where a task rounds its W rows to bf16 pairs per block of KC into
 * its panels (no copy of the model: the scratch is per thread and bounded). */
#include "kernels/matmul_kern.h"

#include "core/dtype.h"
#include "core/f16.h"
#include "core/isa_built.h"

#include <string.h>

#define KC 256              /* f32 path: inputs per packed block (a multiple of every type's block) */
#define KC_BLOCKS (KC / OC_QK)  /* int8 path: blocks of 32 per packed block */
#define TASK_OUT 64         /* outputs per GEMM task: a multiple of every table's nr and q8_nr */
/* outputs per BF16-path task: its panels (BF16_TASK_OUT x KC bf16) fill the f32 path's panel
 * scratch, and each X tile rounded to bf16 serves BF16_TASK_OUT / 32 micro-kernel calls */
#define BF16_TASK_OUT (2 * TASK_OUT)
#define TASK_TOK 256        /* about this many tokens per GEMM task (tokens_per_task; BF16 path: up to 4x) */
#define GEMV_MAX_TOK 4      /* below this many tokens, stream rows with dot products */
#define GEMV_TASK_BYTES 65536   /* W bytes per GEMV task (at least 4 rows) */
#define QUANT_TASK_TOK 16   /* tokens per X-quantization task */

struct oc_matmul_ctx {
    const oc_matmul_kernels *k;
    oc_pool *pool;
    const oc_allocator *alloc;
    oc_matmul_path path;
    int n_threads;
    int64_t max_n_in, max_n_tok;
    size_t rows_off, panel_off, tile_off, rowbuf_off, thread_bytes;  /* per-thread scratch layout */
    unsigned char *scratch;     /* n_threads * thread_bytes */
    oc_q8x *xq;                 /* quantized X: max_n_tok rows of max_n_in / 32 blocks */
    uint16_t *xb;               /* the same memory: X rounded to bf16 for the BF16 path, rows of n_in */
    size_t alloc_bytes;
};

/* ---- tables ----------------------------------------------------------------------------------- */

const oc_matmul_kernels *oc_matmul_kernels_for(oc_isa isa) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    if (!oc_isa_runs(isa, &cpu)) return NULL;
    switch (isa) {
    case OC_ISA_SCALAR: return oc_matmul_kernels_scalar();
#if OC_BUILT_AVX2
    case OC_ISA_AVX2: return oc_matmul_kernels_avx2();
#endif
#if OC_BUILT_AVX512
    case OC_ISA_AVX512: return oc_matmul_kernels_avx512(&cpu);
#endif
#if OC_BUILT_NEON
    case OC_ISA_NEON: return oc_matmul_kernels_neon(&cpu);
#endif
    default: return NULL;
    }
}

oc_isa oc_matmul_kernels_isa(const oc_matmul_kernels *k) { return k->isa; }
const char *oc_matmul_kernels_name(const oc_matmul_kernels *k) { return k->name; }
int oc_matmul_kernels_bf16(const oc_matmul_kernels *k) { return !k->gemm_bf16 ? 0 : k->bf16_gemm ? 2 : 1; }

static int type_index(int32_t dtype) {
    switch (dtype) {
    case OC_DTYPE_F32: return OC_MM_F32;
    case OC_DTYPE_F16: return OC_MM_F16;
    case OC_DTYPE_BF16: return OC_MM_BF16;
    case OC_DTYPE_Q8_0: return OC_MM_Q8_0;
    case OC_DTYPE_Q4_0: return OC_MM_Q4_0;
    case OC_DTYPE_Q4_K: return OC_MM_Q4_K;
    case OC_DTYPE_Q6_K: return OC_MM_Q6_K;
    default: return -1;
    }
}

/* ---- context and scratch ---------------------------------------------------------------------- */

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Per-thread layout; returns 0 on overflow. */
static size_t thread_layout(const oc_matmul_kernels *k, int64_t max_n_in, size_t *rows_off, size_t *panel_off,
                            size_t *tile_off, size_t *rowbuf_off) {
    size_t panel_f32 = (size_t)TASK_OUT * KC * sizeof(float);
    size_t panel_q8 = (size_t)(TASK_OUT / k->q8_group) * KC_BLOCKS * OC_MM_Q8_RECORD_BYTES(k->q8_group);
    size_t tile = (size_t)OC_MAX(OC_MAX(k->mr * k->nr, k->q8_mr * k->q8_nr), k->bf16_mr * OC_MM_BF16_NR) * sizeof(float);
    size_t rowbuf;
    if (!oc_mul_size((size_t)max_n_in, sizeof(float), &rowbuf)) return 0;
    size_t off = 0;
    *rows_off = off;
    /* rows: the f32 path's W rows, or the BF16 path's W rows of one panel converted to bf16
     * (OC_MM_BF16_NR rows of KC) */
    size_t rows_bf16 = k->gemm_bf16 ? (size_t)OC_MM_BF16_NR * KC * sizeof(uint16_t) : 0;
    off += round_up(OC_MAX((size_t)k->nr * KC * sizeof(float), rows_bf16), OC_MEM_ALIGN);
    *panel_off = off;   /* the BF16 path's panels (BF16_TASK_OUT x KC bf16) fit in the f32 path's */
    off += round_up(OC_MAX(panel_f32, panel_q8), OC_MEM_ALIGN);
    *tile_off = off;
    off += round_up(tile, OC_MEM_ALIGN);
    *rowbuf_off = off;
    if (rowbuf > SIZE_MAX - off - OC_MEM_ALIGN) return 0;
    return off + round_up(rowbuf, OC_MEM_ALIGN);
}

/* X converted once per call: the int8 path's blocks, or (tables with BF16 kernels) the BF16 path's
 * bf16 rows, in one area (a call takes one path). */
static size_t xq_bytes(const oc_matmul_kernels *k, int64_t max_n_in, int64_t max_n_tok) {
    size_t n, nb = 0;
    if (!oc_mul_size((size_t)((max_n_in + OC_QK - 1) / OC_QK), (size_t)max_n_tok, &n)) return 0;
    if (!oc_mul_size(n, sizeof(oc_q8x), &n)) return 0;
    if (k->gemm_bf16 && (!oc_mul_size((size_t)max_n_in, (size_t)max_n_tok, &nb) || !oc_mul_size(nb, sizeof(uint16_t), &nb)))
        return 0;
    return OC_MAX(n, nb);
}

size_t oc_matmul_scratch_bytes(const oc_matmul_kernels *k, int n_threads, int64_t max_n_in, int64_t max_n_tok) {
    if (!k || n_threads < 1 || max_n_in < 1 || max_n_tok < 1) return 0;
    size_t a, b, c, d, per_thread = thread_layout(k, max_n_in, &a, &b, &c, &d), total, xq = xq_bytes(k, max_n_in, max_n_tok);
    if (!per_thread || !xq || !oc_mul_size(per_thread, (size_t)n_threads, &total)) return 0;
    if (!oc_add_size(total, round_up(xq, OC_MEM_ALIGN), &total)) return 0;
    return total;
}

size_t oc_matmul_ctx_bytes(const oc_matmul_kernels *k, int n_threads, int64_t max_n_in, int64_t max_n_tok) {
    size_t scratch = oc_matmul_scratch_bytes(k, n_threads, max_n_in, max_n_tok), total = 0;
    if (!scratch || !oc_add_block(&total, sizeof(oc_matmul_ctx)) || !oc_add_block(&total, scratch)) return 0;
    return total;
}

oc_status oc_matmul_ctx_open(oc_matmul_ctx **out, const oc_matmul_kernels *k, oc_pool *pool, int64_t max_n_in,
                             int64_t max_n_tok, const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (!k) return oc_fail(err, OC_ERR_INVALID, "matmul: no kernel table (ISA not built or not runnable here)");
    if (max_n_in < 1 || max_n_tok < 1)
        return oc_fail(err, OC_ERR_INVALID, "matmul: max_n_in %lld and max_n_tok %lld must be >= 1",
                       (long long)max_n_in, (long long)max_n_tok);
    if (TASK_OUT % k->nr || TASK_OUT % k->q8_nr || k->q8_nr % k->q8_group || k->q8_gemv_rows < 1)
        return oc_fail(err, OC_ERR_INVALID, "matmul: table '%s' has tile widths incompatible with the driver", k->name);
    int n_threads = oc_pool_n_threads(pool);
    size_t total = oc_matmul_scratch_bytes(k, n_threads, max_n_in, max_n_tok);
    if (!total) return oc_fail(err, OC_ERR_RANGE, "matmul: scratch size for n_in %lld, n_tok %lld overflows",
                               (long long)max_n_in, (long long)max_n_tok);
    oc_matmul_ctx *c = oc_mem_calloc(alloc, sizeof *c);
    if (!c) return oc_fail(err, OC_ERR_NOMEM, "matmul: out of memory");
    c->scratch = oc_mem_alloc(alloc, total);
    if (!c->scratch) {
        oc_mem_free(alloc, c, sizeof *c);
        return oc_fail(err, OC_ERR_NOMEM, "matmul: out of memory for %zu bytes of scratch", total);
    }
    c->k = k;
    c->pool = pool;
    c->alloc = alloc;
    c->path = OC_MATMUL_AUTO;
    c->n_threads = n_threads;
    c->max_n_in = max_n_in;
    c->max_n_tok = max_n_tok;
    c->thread_bytes = thread_layout(k, max_n_in, &c->rows_off, &c->panel_off, &c->tile_off, &c->rowbuf_off);
    c->xq = (oc_q8x *)(c->scratch + c->thread_bytes * (size_t)n_threads);
    c->xb = (uint16_t *)(void *)c->xq;
    c->alloc_bytes = total;
    *out = c;
    return OC_OK;
}

void oc_matmul_ctx_close(oc_matmul_ctx *c) {
    if (!c) return;
    oc_mem_free(c->alloc, c->scratch, c->alloc_bytes);
    oc_mem_free(c->alloc, c, sizeof *c);
}

void oc_matmul_ctx_set_path(oc_matmul_ctx *c, oc_matmul_path path) { c->path = path; }

/* ---- one call --------------------------------------------------------------------------------- */

typedef struct call {
    const oc_matmul_ctx *ctx;
    const oc_matmul_kernels *k;
    const oc_weight *w;
    int type, i8_type;          /* i8_type >= 0: int8 path */
    int32_t block_elems, block_bytes;
    const float *x;
    size_t x_stride;
    float *y;
    size_t y_stride;
    int64_t n_tok;
    const float *bias;
    int64_t n_blocks;           /* int8 path: blocks per row */
    int64_t task_out, n_out_tasks, task_tok, gemv_rows;
} call;

static unsigned char *thread_scratch(const call *c, int thread) {
    return c->ctx->scratch + c->ctx->thread_bytes * (size_t)thread;
}

static const unsigned char *w_row(const call *c, int64_t o) {
    return (const unsigned char *)c->w->data + (size_t)o * c->w->row_bytes;
}

static void add_bias(const call *c, int64_t t0, int64_t t1, int64_t o0, int64_t o1) {
    if (!c->bias) return;
    for (int64_t t = t0; t < t1; t++) {
        float *yt = c->y + (size_t)t * c->y_stride;
        for (int64_t o = o0; o < o1; o++) yt[o] += c->bias[o];
    }
}

static void quantize_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const call *c = arg;
    int64_t t1 = OC_MIN((task + 1) * QUANT_TASK_TOK, c->n_tok);
    for (int64_t t = task * QUANT_TASK_TOK; t < t1; t++)
        c->k->quantize_q8x(c->x + (size_t)t * c->x_stride, c->w->n_in, oc_mm_i8_x_group(c->i8_type),
                           c->ctx->xq + (size_t)t * (size_t)c->n_blocks);
}

static int long_rows(const call *c) {
    return c->i8_type < 0 && c->k->gemv_long[c->type] && c->w->n_in > OC_MM_GEMV_LONG_N_IN;
}

/* The BF16 path's X: rows of n_in bf16 (n_in even: whole pairs), once per call for all tasks. */
static void x_to_bf16_task(void *arg, int64_t task, int thread) {
    (void)thread;
    const call *c = arg;
    int64_t t1 = OC_MIN((task + 1) * QUANT_TASK_TOK, c->n_tok);
    for (int64_t t = task * QUANT_TASK_TOK; t < t1; t++)
        c->k->x_to_bf16(c->x + (size_t)t * c->x_stride, c->w->n_in, c->ctx->xb + (size_t)t * (size_t)c->w->n_in);
}

static void gemv_task(void *arg, int64_t task, int thread) {
    const call *c = arg;
    const oc_matmul_kernels *k = c->k;
    int64_t o0 = task * c->gemv_rows, o1 = OC_MIN(o0 + c->gemv_rows, c->w->n_out), n_in = c->w->n_in;
    float *rowbuf = (float *)(thread_scratch(c, thread) + c->ctx->rowbuf_off);
    if (c->i8_type >= 0) {   /* q8_gemv_rows rows per kernel call share the loads of X */
        for (int64_t o = o0; o < o1; o += k->q8_gemv_rows) {
            int n_rows = (int)OC_MIN((int64_t)k->q8_gemv_rows, o1 - o);
            for (int64_t t = 0; t < c->n_tok; t++)
                k->gemv_q8x[c->i8_type](w_row(c, o), c->w->row_bytes, n_rows, c->ctx->xq + (size_t)t * (size_t)c->n_blocks,
                                        c->n_blocks, c->y + (size_t)t * c->y_stride + (size_t)o);
        }
        add_bias(c, 0, c->n_tok, o0, o1);
        return;
    }
    if (long_rows(c)) {   /* k->gemv_long_rows rows per call share the loads of x (matmul_kern.h) */
        for (int64_t o = o0; o < o1; o += k->gemv_long_rows) {
            int n_rows = (int)OC_MIN((int64_t)k->gemv_long_rows, o1 - o);
            for (int64_t t = 0; t < c->n_tok; t++)
                k->gemv_long[c->type](w_row(c, o), c->w->row_bytes, n_rows, c->x + (size_t)t * c->x_stride, n_in,
                                      c->y + (size_t)t * c->y_stride + (size_t)o);
        }
        add_bias(c, 0, c->n_tok, o0, o1);
        return;
    }
    for (int64_t o = o0; o < o1; o++) {
        const unsigned char *row = w_row(c, o);
        float bias = c->bias ? c->bias[o] : 0.0f;
        if (k->dot_f32[c->type]) {
            for (int64_t t = 0; t < c->n_tok; t++)
                c->y[(size_t)t * c->y_stride + (size_t)o] = k->dot_f32[c->type](row, c->x + (size_t)t * c->x_stride, n_in) + bias;
        } else {
            k->to_f32[c->type](row, rowbuf, n_in);
            for (int64_t t = 0; t < c->n_tok; t++)
                c->y[(size_t)t * c->y_stride + (size_t)o] = k->dot_f32[OC_MM_F32](rowbuf, c->x + (size_t)t * c->x_stride, n_in) + bias;
        }
    }
}

/* Runs a micro-kernel on the tile at y; a tile narrower than the kernel goes through a scratch tile
 * so that kernels always write full width. */
typedef struct tile {
    float *y;
    size_t y_stride;
    int mr, width, kernel_width;
    float *buf;
} tile;

/* The tile of mr tokens from t and outputs from j0 (up to o1) for a kernel kernel_width wide. */
static tile tile_at(const call *c, int64_t t, int64_t j0, int mr, int64_t o1, int kernel_width, float *buf) {
    tile tl = { c->y + (size_t)t * c->y_stride + (size_t)j0, c->y_stride, mr, (int)OC_MIN((int64_t)kernel_width, o1 - j0),
                kernel_width, buf };
    return tl;
}

static float *tile_begin(tile *t, int accumulate) {
    if (t->width == t->kernel_width) return t->y;
    if (accumulate)   /* the running sums, and zeros (not stale scratch) in the columns beyond Y */
        for (int i = 0; i < t->mr; i++) {
            float *row = t->buf + (size_t)i * (size_t)t->kernel_width;
            memcpy(row, t->y + (size_t)i * t->y_stride, (size_t)t->width * sizeof(float));
            memset(row + t->width, 0, (size_t)(t->kernel_width - t->width) * sizeof(float));
        }
    return t->buf;
}

static void tile_end(const tile *t) {
    if (t->width == t->kernel_width) return;
    for (int i = 0; i < t->mr; i++) memcpy(t->y + (size_t)i * t->y_stride, t->buf + (size_t)i * (size_t)t->kernel_width, (size_t)t->width * sizeof(float));
}

/* The outputs [o0, o1) and tokens [t0, t1) GEMM task `task` owns. */
typedef struct box { int64_t o0, o1, t0, t1; } box;

static box task_box(const call *c, int64_t task) {
    box b;
    b.o0 = (task % c->n_out_tasks) * c->task_out;
    b.o1 = OC_MIN(b.o0 + c->task_out, c->w->n_out);
    b.t0 = (task / c->n_out_tasks) * c->task_tok;
    b.t1 = OC_MIN(b.t0 + c->task_tok, c->n_tok);
    return b;
}

static void gemm_f32_task(void *arg, int64_t task, int thread) {
    const call *c = arg;
    const oc_matmul_kernels *k = c->k;
    const oc_weight *w = c->w;
    box bx = task_box(c, task);
    int64_t o0 = bx.o0, o1 = bx.o1, t0 = bx.t0, t1 = bx.t1;
    unsigned char *s = thread_scratch(c, thread);
    float *rows = (float *)(s + c->ctx->rows_off), *panel = (float *)(s + c->ctx->panel_off);
    float *tbuf = (float *)(s + c->ctx->tile_off);
    for (int64_t k0 = 0; k0 < w->n_in; k0 += KC) {
        int64_t kc = OC_MIN((int64_t)KC, w->n_in - k0);
        size_t src_off = (size_t)(k0 / c->block_elems) * (size_t)c->block_bytes;
        for (int64_t j0 = o0; j0 < o1; j0 += k->nr) {
            int n_rows = (int)OC_MIN((int64_t)k->nr, o1 - j0);
            /* F32 rows are copied too: packing straight from rows n_in apart measured 25% slower
             * (row strides that are multiples of 2 KiB alias in the L1 sets) */
            for (int r = 0; r < n_rows; r++) k->to_f32[c->type](w_row(c, j0 + r) + src_off, rows + (size_t)r * KC, kc);
            k->pack_f32(rows, KC, n_rows, kc, panel + (size_t)(j0 - o0) * KC);
        }
        for (int64_t t = t0; t < t1; t += k->mr) {
            int mr = (int)OC_MIN((int64_t)k->mr, t1 - t);
            for (int64_t j0 = o0; j0 < o1; j0 += k->nr) {
                tile tl = tile_at(c, t, j0, mr, o1, k->nr, tbuf);
                float *yt = tile_begin(&tl, k0 > 0);
                k->gemm_f32(mr, kc, c->x + (size_t)t * c->x_stride + (size_t)k0, c->x_stride,
                            panel + (size_t)(j0 - o0) * KC, yt, yt == tl.y ? c->y_stride : (size_t)k->nr, k0 > 0);
                tile_end(&tl);
            }
        }
    }
    add_bias(c, t0, t1, o0, o1);
}

static void gemm_q8_task(void *arg, int64_t task, int thread) {
    const call *c = arg;
    const oc_matmul_kernels *k = c->k;
    const oc_weight *w = c->w;
    box bx = task_box(c, task);
    int64_t o0 = bx.o0, o1 = bx.o1, t0 = bx.t0, t1 = bx.t1;
    unsigned char *s = thread_scratch(c, thread);
    unsigned char *panel = s + c->ctx->panel_off;
    float *tbuf = (float *)(s + c->ctx->tile_off);
    size_t micro_panel_bytes = (size_t)(k->q8_nr / k->q8_group) * KC_BLOCKS * OC_MM_Q8_RECORD_BYTES(k->q8_group);
    for (int64_t b0 = 0; b0 < c->n_blocks; b0 += KC_BLOCKS) {
        int64_t nb = OC_MIN((int64_t)KC_BLOCKS, c->n_blocks - b0);
        size_t src_off = (size_t)b0 * (size_t)c->block_bytes;
        for (int64_t j0 = o0; j0 < o1; j0 += k->q8_nr)
            k->pack_q8[c->i8_type](w_row(c, j0) + src_off, w->row_bytes, (int)OC_MIN((int64_t)k->q8_nr, o1 - j0), nb,
                                   panel + (size_t)((j0 - o0) / k->q8_nr) * micro_panel_bytes);
        for (int64_t t = t0; t < t1; t += k->q8_mr) {
            int mr = (int)OC_MIN((int64_t)k->q8_mr, t1 - t);
            for (int64_t j0 = o0; j0 < o1; j0 += k->q8_nr) {
                tile tl = tile_at(c, t, j0, mr, o1, k->q8_nr, tbuf);
                float *yt = tile_begin(&tl, b0 > 0);
                k->gemm_q8[c->i8_type](mr, nb, c->ctx->xq + (size_t)t * (size_t)c->n_blocks + (size_t)b0, (size_t)c->n_blocks,
                                       panel + (size_t)((j0 - o0) / k->q8_nr) * micro_panel_bytes, yt,
                                       yt == tl.y ? c->y_stride : (size_t)k->q8_nr, b0 > 0);
                tile_end(&tl);
            }
        }
    }
    add_bias(c, t0, t1, o0, o1);
}

/* The BF16 path's panel of W rows [j0, j0 + n_rows) x inputs [k0, k0 + kc) in the packed layout
 * (matmul_kern.h): each row to bf16 (F16 through f32, exact, then rounded to nearest even; BF16
 * copied), then transposed into pairs x 32 outputs. Once per task and block of KC, so the cost is
 * shared by the task's tokens (TASK_TOK) as the f32 path's dequantization is. */
static void pack_bf16_panel(const call *c, int64_t j0, int n_rows, int64_t k0, int64_t kc, uint16_t *wb, float *rowbuf,
                            uint32_t *panel) {
    const oc_matmul_kernels *k = c->k;
    for (int r = 0; r < n_rows; r++) {
        const unsigned char *src = w_row(c, j0 + r) + (size_t)k0 * sizeof(uint16_t);
        if (c->type == OC_MM_BF16) {
            memcpy(wb + (size_t)r * KC, src, (size_t)kc * sizeof(uint16_t));
        } else if (k->f16_to_bf16) {
            k->f16_to_bf16((const uint16_t *)(const void *)src, kc, wb + (size_t)r * KC);
        } else {
            k->to_f32[c->type](src, rowbuf, kc);
            k->x_to_bf16(rowbuf, kc, wb + (size_t)r * KC);
        }
    }
    k->pack_bf16((const uint32_t *)(const void *)wb, KC / 2, n_rows, kc / 2, panel);
}

/* Prefetch of W rows [row, o1) x inputs [k0, k0 + KC) (matmul.c gemm_bf16_task), per_step lines a step. */
typedef struct bf16_pf { int64_t row, o1, k0, line, n_lines, per_step; } bf16_pf;

static bf16_pf bf16_pf_init(const call *c, int64_t o0, int64_t o1, int64_t k0, int64_t n_steps) {
    bf16_pf p = { o0, o1, k0, 0, 0, 0 };
    if (k0 >= c->w->n_in || n_steps < 1) { p.row = o1; return p; }   /* no next block */
    p.n_lines = (OC_MIN((int64_t)KC, c->w->n_in - k0) * (int64_t)sizeof(uint16_t) + 63) / 64;
    p.per_step = (p.n_lines * (o1 - o0) + n_steps - 1) / n_steps;
    return p;
}

static inline void bf16_pf_step(const call *c, bf16_pf *p) {
    for (int64_t e = 0; e < p->per_step && p->row < p->o1; e++) {
        OC_PREFETCH(w_row(c, p->row) + (size_t)p->k0 * sizeof(uint16_t) + (size_t)p->line * 64);
        if (++p->line == p->n_lines) { p->line = 0; p->row++; }
    }
}

static void gemm_bf16_task(void *arg, int64_t task, int thread) {
    const call *c = arg;
    const oc_matmul_kernels *k = c->k;
    const oc_weight *w = c->w;
    box bx = task_box(c, task);
    int64_t o0 = bx.o0, o1 = bx.o1, t0 = bx.t0, t1 = bx.t1;
    unsigned char *s = thread_scratch(c, thread);
    uint16_t *wb = (uint16_t *)(void *)(s + c->ctx->rows_off);   /* OC_MM_BF16_NR rows of KC */
    const uint32_t *xb = (const uint32_t *)(const void *)c->ctx->xb;   /* n_tok rows of n_in / 2 pairs */
    size_t x_pairs = (size_t)w->n_in / 2;
    uint32_t *panels = (uint32_t *)(void *)(s + c->ctx->panel_off);   /* BF16_TASK_OUT / 32 panels of KC / 2 pairs */
    float *rowbuf = (float *)(void *)(s + c->ctx->rowbuf_off);
    float *tbuf = (float *)(s + c->ctx->tile_off);
    for (int64_t k0 = 0; k0 < w->n_in; k0 += KC) {
        int64_t kc = OC_MIN((int64_t)KC, w->n_in - k0);
        for (int64_t j0 = o0; j0 < o1; j0 += OC_MM_BF16_NR)
            pack_bf16_panel(c, j0, (int)OC_MIN((int64_t)OC_MM_BF16_NR, o1 - j0), k0, kc, wb, rowbuf,
                            panels + (size_t)((j0 - o0) / OC_MM_BF16_NR) * (KC / 2) * OC_MM_BF16_NR);
        /* The next block's W rows into the cache while this block's tiles run: the rows come from
         * DRAM once per task (the vision encoder's 1.3 GB of F16 matrices), and read where the
         * panel is packed they stalled the packing (f16_to_bf16 and this loop: 18% of gemm_bf16's
         * samples in a 448x448 encode on a Zen 4, 12% with this; BENCHMARKS.md "matmul"). One
         * line of one row per step, spread evenly over the block's tile calls. (Also prefetching
         * the first block of task + n_threads after the last block: 11.8%, not kept.) */
        bf16_pf pf = bf16_pf_init(c, o0, o1, k0 + KC, ((t1 - t0 + k->bf16_mr - 1) / k->bf16_mr) *
                                                       ((o1 - o0 + OC_MM_BF16_NR - 1) / OC_MM_BF16_NR));
        for (int64_t t = t0; t < t1; t += k->bf16_mr) {
            int mr = (int)OC_MIN((int64_t)k->bf16_mr, t1 - t);
            for (int64_t j0 = o0; j0 < o1; j0 += OC_MM_BF16_NR) {
                bf16_pf_step(c, &pf);
                const uint32_t *panel = panels + (size_t)((j0 - o0) / OC_MM_BF16_NR) * (KC / 2) * OC_MM_BF16_NR;
                tile tl = tile_at(c, t, j0, mr, o1, OC_MM_BF16_NR, tbuf);
                float *yt = tile_begin(&tl, k0 > 0);
                k->gemm_bf16(mr, kc / 2, xb + (size_t)t * x_pairs + (size_t)k0 / 2, x_pairs, panel, yt,
                             yt == tl.y ? c->y_stride : (size_t)OC_MM_BF16_NR, k0 > 0);
                tile_end(&tl);
            }
        }
    }
    add_bias(c, t0, t1, o0, o1);
}

/* Tokens per task of the float and int8 GEMMs: about TASK_TOK, a multiple of mr, the tokens split
 * evenly. A task packs its W rows once (and reads them from DRAM once) whatever its tokens: TASK_TOK
 * rounded down to mr 6 cut 512 tokens into 252 + 252 + 8, and the third task converted and packed
 * all of W for 8 tokens (now 258 + 254); 1024 vision patches: 4 x 252 + 16, now 4 x 256 or 258.
 * (Tasks of up to 2 * TASK_TOK, as the BF16 path takes, measured within the noise of a shared
 * machine: faster on `up`, slower on `vision-up`; not kept.) The split does not change any output
 * element's sums (rows of X are independent): results stay free of the thread count. */
static int64_t tokens_per_task(int64_t n_tok, int mr) {
    int64_t n_tasks = (n_tok + TASK_TOK - 1) / TASK_TOK;
    return ((n_tok + n_tasks - 1) / n_tasks + mr - 1) / mr * mr;
}

int oc_matmul_uses_bf16(const oc_matmul_ctx *ctx, const oc_weight *w, int64_t n_tok) {
    const oc_matmul_kernels *k = ctx->k;
    if (n_tok < GEMV_MAX_TOK || !k->gemm_bf16 || (w->dtype != OC_DTYPE_F16 && w->dtype != OC_DTYPE_BF16) || w->n_in % 2)
        return 0;
    return ctx->path == OC_MATMUL_BF16 || (ctx->path == OC_MATMUL_AUTO && k->bf16_gemm);
}

/* OC_MM_I8_* when this call takes the int8 path, else -1: only where the table has an int8 kernel
 * for this type and shape (GEMM or GEMV), and the path asks for it. */
static int int8_type(const oc_matmul_ctx *ctx, int type, int64_t n_tok) {
    static const int i8_of[OC_MM_N_TYPES] = { -1, -1, -1, OC_MM_I8_Q8_0, OC_MM_I8_Q4_0, OC_MM_I8_Q4_K, OC_MM_I8_Q6_K };
    const oc_matmul_kernels *k = ctx->k;
    int i8 = type >= 0 ? i8_of[type] : -1, gemv = n_tok < GEMV_MAX_TOK;
    if (i8 < 0 || ctx->path == OC_MATMUL_FLOAT) return -1;
    if (gemv ? !k->gemv_q8x[i8] : !k->gemm_q8[i8]) return -1;
    if (ctx->path == OC_MATMUL_INT8) return i8;
    return (gemv ? k->int8_gemv[i8] : k->int8_gemm[i8]) ? i8 : -1;
}

int oc_matmul_uses_int8(const oc_matmul_ctx *ctx, const oc_weight *w, int64_t n_tok) {
    return int8_type(ctx, type_index(w->dtype), n_tok) >= 0;
}

oc_status oc_matmul(oc_matmul_ctx *ctx, const oc_weight *w, const float *x, size_t x_stride, float *y,
                    size_t y_stride, int64_t n_tok, const float *bias, oc_error *err) {
    if (!ctx || !w || !x || !y) return oc_fail(err, OC_ERR_INVALID, "matmul: NULL argument");
    const oc_matmul_kernels *k = ctx->k;
    int type = type_index(w->dtype);
    if (type < 0) return oc_fail(err, OC_ERR_UNSUPPORTED, "matmul: weight type %s (%d) is not supported",
                                 oc_dtype_name(w->dtype), (int)w->dtype);
    const oc_dtype_traits *tr = oc_dtype_get(w->dtype);
    if (w->n_in < 1 || w->n_out < 1 || n_tok < 0)
        return oc_fail(err, OC_ERR_INVALID, "matmul: bad shape n_in %lld, n_out %lld, n_tok %lld",
                       (long long)w->n_in, (long long)w->n_out, (long long)n_tok);
    if (w->n_in % tr->block_elems)
        return oc_fail(err, OC_ERR_INVALID, "matmul: n_in %lld is not a multiple of the %s block (%d)",
                       (long long)w->n_in, tr->name, (int)tr->block_elems);
    if (w->n_in > ctx->max_n_in || n_tok > ctx->max_n_tok)
        return oc_fail(err, OC_ERR_RANGE, "matmul: n_in %lld / n_tok %lld exceed the context's %lld / %lld",
                       (long long)w->n_in, (long long)n_tok, (long long)ctx->max_n_in, (long long)ctx->max_n_tok);
    if (w->row_bytes < oc_dtype_row_bytes(w->dtype, (uint64_t)w->n_in))
        return oc_fail(err, OC_ERR_INVALID, "matmul: row_bytes %zu is less than a %s row of %lld (%llu)", w->row_bytes,
                       tr->name, (long long)w->n_in, (unsigned long long)oc_dtype_row_bytes(w->dtype, (uint64_t)w->n_in));
    /* every type's fields are at least 2-byte quantities (f16 scales, halves); f32 needs 4 */
    size_t align = type == OC_MM_F32 ? 4 : 2;
    if (!w->data || (uintptr_t)w->data % align || w->row_bytes % align)
        return oc_fail(err, OC_ERR_INVALID, "matmul: %s weight data or row_bytes not %zu-byte aligned", tr->name, align);
    if (n_tok > 0 && (x_stride < (size_t)w->n_in || y_stride < (size_t)w->n_out))
        return oc_fail(err, OC_ERR_INVALID, "matmul: x_stride %zu < n_in %lld or y_stride %zu < n_out %lld", x_stride,
                       (long long)w->n_in, y_stride, (long long)w->n_out);
    if (n_tok == 0) return OC_OK;

    int gemv = n_tok < GEMV_MAX_TOK;
    int i8_type = int8_type(ctx, type, n_tok);
    call c = { ctx, k, w, type, i8_type, tr->block_elems, tr->block_bytes, x, x_stride, y, y_stride, n_tok, bias,
               w->n_in / OC_QK, TASK_OUT, (w->n_out + TASK_OUT - 1) / TASK_OUT, 0, 0 };
    if (i8_type >= 0)
        oc_pool_run(ctx->pool, (n_tok + QUANT_TASK_TOK - 1) / QUANT_TASK_TOK, quantize_task, &c);
    if (gemv) {
        int64_t unit = i8_type >= 0 ? k->q8_gemv_rows : long_rows(&c) ? k->gemv_long_rows : 1;   /* whole kernel calls per task */
        c.gemv_rows = OC_MAX((int64_t)4, (int64_t)(GEMV_TASK_BYTES / w->row_bytes));
        c.gemv_rows = OC_MAX(unit, c.gemv_rows / unit * unit);
        oc_pool_run(ctx->pool, (w->n_out + c.gemv_rows - 1) / c.gemv_rows, gemv_task, &c);
    } else if (oc_matmul_uses_bf16(ctx, w, n_tok)) {
        oc_pool_run(ctx->pool, (n_tok + QUANT_TASK_TOK - 1) / QUANT_TASK_TOK, x_to_bf16_task, &c);
        c.task_out = BF16_TASK_OUT;
        c.n_out_tasks = (w->n_out + BF16_TASK_OUT - 1) / BF16_TASK_OUT;
        /* W is packed per task: up to 4 * TASK_TOK tokens share it, unless that leaves fewer than 4
         * tasks per thread (on a Zen 4: 2 * TASK_TOK measured 3% faster than TASK_TOK on the GEMM
         * of bench matmul, 4 * TASK_TOK 7% less CPU time than 2 * TASK_TOK in the vision encoder's
         * GEMMs at 1024 patches, whose weights come from DRAM once per task). The split does not
         * change any output element's sums (rows of X are independent): results stay free of the
         * thread count. */
        for (int64_t f = 4; f >= 1; f /= 2) {
            c.task_tok = OC_MAX((int64_t)1, (int64_t)(f * TASK_TOK / k->bf16_mr)) * k->bf16_mr;
            if (c.n_out_tasks * ((n_tok + c.task_tok - 1) / c.task_tok) >= 4 * (int64_t)ctx->n_threads) break;
        }
        int64_t n_tok_tasks = (n_tok + c.task_tok - 1) / c.task_tok;
        oc_pool_run(ctx->pool, c.n_out_tasks * n_tok_tasks, gemm_bf16_task, &c);
    } else {
        c.task_tok = tokens_per_task(n_tok, i8_type >= 0 ? k->q8_mr : k->mr);
        int64_t n_tok_tasks = (n_tok + c.task_tok - 1) / c.task_tok;
        oc_pool_run(ctx->pool, c.n_out_tasks * n_tok_tasks, i8_type >= 0 ? gemm_q8_task : gemm_f32_task, &c);
    }
    return OC_OK;
}
