/* backend.h: the interface between the model graphs (text_layer.c, vision_encoder.c) and the hardware
 * that runs them: a table of operations (oc_backend_ops) on opaque buffers (oc_bt), one call per
 * layer-level operation over the whole batch. The graphs hold handles and element offsets and never
 * touch activations, so a device backend can keep weights, activations and the KV cache on the
 * device; host memory is crossed only by the explicit transfer operations (write, read, bind,
 * map_read), which on the CPU backend cost nothing when the memory is already the host's.
 *
 * Implementations, each a provider (the table at the end; backend.c dispatches through it):
 * backend_cpu.c (the thread pool over matmul.c, nn.c and attn.c, the same arithmetic in the same
 * order as the graphs had before this interface) and opencl/cl_backend.c (an OpenCL device through
 * opencl/ host code; built only with OpenCL). Each graph context (oc_text_ctx,
 * oc_vision_ctx) opens its own backend instance sized for its limits; both are opened, with every
 * buffer, when an oc_context opens, and on OpenCL both run on one oc_backend_device the context
 * opened (one device context, its programs built once). */
#ifndef OC_BACKEND_H
#define OC_BACKEND_H

#include "attention/attn.h"
#include "kernels/matmul.h"
#include "kernels/nn.h"

#define OC_BACKEND_OPS_VERSION 5

typedef enum oc_backend_kind { OC_BACKEND_KIND_CPU = 0, OC_BACKEND_KIND_OPENCL } oc_backend_kind;

/* ---- handles ------------------------------------------------------------------------------------ */

/* Buffer flags (oc_bt.flags, given to alloc). */
#define OC_BT_HOST 1u    /* stands for caller memory named per call with bind(): the CPU backend
                            uses that memory in place and allocates nothing; a device backend
                            allocates n_bytes and copies in write() / out in read() */

/* A backend buffer. impl belongs to the backend (host memory on CPU, a cl_mem on OpenCL): graph
 * code never reads it. Absent optional data (a layer without a bias) is n_bytes == 0. */
typedef struct oc_bt {
    void *impl;
    size_t n_bytes;
    uint32_t flags;      /* OC_BT_* from alloc, plus the backend's own bits */
} oc_bt;

/* A weight matrix as the backend holds it: w describes it (type, shape, row bytes; w.data is the
 * host original, the GGUF mapping), t holds its rows where the backend reads them (CPU: the mapping
 * itself, zero-copy; a device: uploaded once at context open). */
typedef struct oc_bw {
    oc_weight w;
    oc_bt t;
} oc_bw;

typedef enum oc_norm_kind {
    OC_NORM_RMS = 0,     /* nn.h oc_rms_norm */
    OC_NORM_LAYER        /* nn.h oc_layer_norm */
} oc_norm_kind;

/* Where an attention call's tensors are (attn_call.h describes the call; its offsets and strides
 * index these buffers): q and out f32, k and v of the call's kv_dtype. The call's mask description
 * stays host data, like kernel arguments: the CPU engine classifies tiles from it on the host; a
 * device backend copies what its kernel needs into its own scratch (sized at open for the largest
 * call). */
typedef struct oc_attn_bt {
    const oc_bt *q, *k, *v;
    oc_bt *out;
} oc_attn_bt;

/* One step of a shrinking KV cache's scoring, selection or compaction run where the cache is
 * (kvcache/kv_select.h defines each rule on host arrays; a device that runs them keeps the masses,
 * the chosen sets and their sizes in its own buffers, so a prefill queues every step of every
 * layer without waiting for the device). Every buffer here is the device's (oc_bt); element
 * offsets; lists and counts int32, masses f32. A chosen set's size stays in counts[] and feeds the
 * next steps' ranges; the host reads the sets once, after the prompt (text_kv_dev.c). */
typedef enum oc_kv_dev_kind {
    OC_KV_DEV_SCORE = 1,   /* acc[acc_off + g * acc_stride + j] += the softmax probability of key j
                              (j < n) in every observed row of every head of kv head g (every head
                              into one row when acc_stride is 0): kv_select.h oc_kv_score_rows */
    OC_KV_DEV_ZIPVL,       /* the important set of kv_select.h oc_kv_select_zipvl over acc[acc_off
                              + j], j < n: p keys from the cumulative mass >= target, the top p by
                              mass / nnz (nnz from the probe positions), plus the last `recent` */
    OC_KV_DEV_SPARSEMM,    /* kv_select.h oc_kv_select_sparsemm (within NULL) or _within */
    OC_KV_DEV_KEEP,        /* kv_keep of a layer's K and V, every kv head, with the kept rows and
                              their counts on the device */
    OC_KV_DEV_ZERO         /* acc[acc_off + j] = 0 for j < n */
} oc_kv_dev_kind;

typedef struct oc_kv_dev_op {
    oc_kv_dev_kind kind;
    /* SCORE: the rows are query positions pos[pos_first + i] (pos NULL: pos0 + i), i < n_rows,
     * ascending; row of position p, head h at q[q_off + (p - q_base) * q_stride + h * head_dim];
     * key j of kv head g at k[k_off + j * k_stride + g * head_dim] (f16); stats: 2 floats per row
     * and head; part: n_rows x (n_head_kv, or 1 when acc_stride is 0) x n floats of scratch */
    const oc_bt *q, *k, *pos;
    int64_t q_off, k_off;
    int32_t q_stride, q_base, k_stride, pos_first, pos0, n_rows, n_head, n_head_kv, head_dim, acc_stride;
    float scale;
    oc_bt *stats, *part;
    /* every kind but KEEP: the masses; n keys (ZIPVL, SPARSEMM without a within count: the count) */
    oc_bt *acc;
    int64_t acc_off;
    int32_t n;
    oc_bt *counts;           /* int32 set sizes */
    oc_bt *flags, *norm;     /* scratch: n int32, n f32 */
    /* ZIPVL: target = tau x the rows' total mass; probes: n_probes ascending positions (nnz[j] =
     * n_head x the probes at or after j); p_idx: a count slot for p; part: scratch of 32 x n
     * floats (a backend may use less) */
    const oc_bt *probes;
    int32_t n_probes, recent, p_idx;
    double target;
    /* SPARSEMM: budget, window; within: the subset's ascending positions at within[within_off],
     * its size counts[within_idx] (within NULL: keys 0..n-1); map_within: the list holds within[t]
     * (absolute positions), else t (indices into the subset) */
    int32_t budget, window, within_idx, map_within;
    const oc_bt *within;
    int64_t within_off;
    /* the chosen set, ascending: n_copies copies at list[list_off + c * list_stride], its size at
     * counts[count_idx + c]. KEEP: kv head g < n_groups moves its rows list[list_off + g *
     * list_stride + r] (+ shift) for r < counts[count_idx + g] */
    oc_bt *list;
    int64_t list_off;
    int32_t list_stride, n_copies, count_idx;
    /* KEEP: kv_keep's rows (t_off, t_stride, row_elems as there) in the K cache t (NULL: none) and
     * the V cache t2, kv head g's at t_off + g * row_elems (t2_off + ...), each source row shift
     * (shift2) rows past its list entry */
    oc_bt *t, *t2;
    int64_t t_off, t2_off, t_stride;
    int32_t row_elems, shift, shift2, n_groups;
} oc_kv_dev_op;

/* ---- opening ------------------------------------------------------------------------------------ */

/* The largest calls an instance must serve; its scratch is sized from these at open. */
typedef struct oc_backend_limits {
    int64_t max_n_in, max_n_tok;         /* matmul: inputs per row, rows per call (also the most
                                            rows of a gather_rows call) */
    oc_attn_dims attn;                   /* attention (OpenCL: every call has these head counts
                                            and head_dim; n_head 0: the instance runs none) */
    int32_t max_images, max_segments;    /* attention: image spans of a layout, segments of an
                                            OC_ATTN_SEGMENTS call (OpenCL sizes its tables by them) */
    int per_kv_head;                     /* attention also runs calls of one kv head and its
                                            n_head / n_head_kv query heads (a compacted KV cache,
                                            kvcache/kv_cache.h; OpenCL opens tables for them) */
    int32_t max_shared_keys;             /* attention: keys per call with k_shared flags (Q-Cache
                                            VLA, attn_call.h; OpenCL sizes their buffer); 0: none */
} oc_backend_limits;

/* A compute device opened once and shared by several instances (an oc_context's text and vision
 * graphs): OpenCL's device context, queue and built programs. Opening one for OC_BACKEND_KIND_CPU
 * gives NULL (nothing to share). Used by one thread at a time, like its instances.
 * [alloc: yes] [errors: OC_ERR_NOT_FOUND (no platform / device, or none matches the selector: the
 * message lists them), OC_ERR_DEVICE (a program did not build: the message names it), OC_ERR_NOMEM,
 * OC_ERR_UNSUPPORTED (OpenCL not built in)] */
typedef struct oc_backend_device oc_backend_device;
oc_status oc_backend_device_open(oc_backend_device **out, oc_backend_kind kind, const char *selector,
                                 const oc_allocator *alloc, oc_error *err);
void oc_backend_device_close(oc_backend_device *dev);   /* NULL is a no-op; close its instances first */
/* "OpenCL, <device> (<platform>)"; "CPU" for NULL. */
const char *oc_backend_device_name(const oc_backend_device *dev);
/* Device memory the instances on dev hold now (weights, buffers, KV cache; not the driver's own
 * or the attention tables'), in bytes; 0 for NULL. */
size_t oc_backend_device_bytes(const oc_backend_device *dev);
/* Waits until every operation queued on dev has run, so a stage's time is its own: the vision
 * encoder's output stays on the device, and without this the last image's kernels would still be
 * running when the prefill's timer starts. OC_OK at once for NULL (the CPU runs each op before it
 * returns). [alloc: no] [errors: OC_ERR_DEVICE] */
oc_status oc_backend_device_finish(oc_backend_device *dev, oc_error *err);

/* Which backend and where. */
typedef struct oc_backend_spec {
    oc_backend_kind kind;
    const char *device;                  /* OpenCL: device index or name substring; NULL: default */
    oc_pool *pool;                       /* CPU: borrowed, may be NULL (serial) */
    oc_isa isa;                          /* CPU: kernels to use */
    oc_backend_device *dev;              /* OpenCL: the device to run on (borrowed, outlives the
                                            instance); NULL: the instance opens `device` alone */
} oc_backend_spec;

typedef struct oc_backend oc_backend;

/* One product of matmul_n: y rows of w->w.n_out floats from y_off, y_stride apart; bias NULL: none. */
typedef struct oc_mm_out {
    const oc_bw *w;
    oc_bt *y;
    int64_t y_off, y_stride;
    const oc_bt *bias;
} oc_mm_out;

/* Every operation returns OC_OK or a status with a message (a device can fail at any call;
 * the CPU backend fails only on arguments outside a buffer, a graph bug). Offsets and counts are
 * in elements of the operand's type (f32 unless stated), transfers in bytes. Operations run in
 * call order; read() and map_read() return when the data is on the host. */
typedef struct oc_backend_ops {
    int version;                         /* OC_BACKEND_OPS_VERSION; new members go at the end */
    const char *name;                    /* "cpu", "opencl" */
    void (*close)(oc_backend *be);

    /* -- memory: every buffer is made at graph-context open, never during a forward call -- */
    /* n_bytes of uninitialized storage (flags: OC_BT_*). */
    oc_status (*alloc)(oc_backend *be, oc_bt *t, size_t n_bytes, uint32_t flags, oc_error *err);
    /* Releases what alloc or import made (for a weight: its oc_bw.t); a zeroed oc_bt is a no-op. */
    void (*free)(oc_backend *be, oc_bt *t);
    /* Read-only data that outlives the backend (norm weights, biases): CPU wraps host, zero-copy;
     * a device copies it once. host NULL or n_bytes 0 gives an absent buffer. */
    oc_status (*import)(oc_backend *be, oc_bt *t, const void *host, size_t n_bytes, oc_error *err);
    /* A weight matrix, given once (see oc_bw); src->data must outlive the backend. */
    oc_status (*weight)(oc_backend *be, oc_bw *w, const oc_weight *src, oc_error *err);

    /* -- transfers -- */
    /* Names the caller memory an OC_BT_HOST buffer stands for, until the next bind; n_bytes must
     * not exceed what alloc was given. The memory is written only if an operation writes t. */
    oc_status (*bind)(oc_backend *be, oc_bt *t, const void *host, size_t n_bytes, oc_error *err);
    /* host -> t at off_bytes. Copies nothing when src is already that memory (CPU after bind). */
    oc_status (*write)(oc_backend *be, oc_bt *t, size_t off_bytes, const void *src, size_t n_bytes,
                       oc_error *err);
    /* t at off_bytes -> host; returns when done. Copies nothing when dst is already that memory. */
    oc_status (*read)(oc_backend *be, const oc_bt *t, size_t off_bytes, void *dst, size_t n_bytes,
                      oc_error *err);
    /* A host view of n_bytes of t for reading (debug hooks), valid until unmap; NULL on failure.
     * A device copies into host memory it allocates here (one view at a time) and frees at unmap. */
    const void *(*map_read)(oc_backend *be, const oc_bt *t, size_t off_bytes, size_t n_bytes,
                            oc_error *err);
    void (*unmap)(oc_backend *be, const oc_bt *t, const void *p);

    /* -- compute -- */
    /* y[t][o] = sum_i W[o][i] x[t][i] (+ bias[o]) for t < n_tok (matmul.h; bias NULL: none). */
    oc_status (*matmul)(oc_backend *be, const oc_bw *w, const oc_bt *x, int64_t x_off, int64_t x_stride,
                        oc_bt *y, int64_t y_off, int64_t y_stride, int64_t n_tok, const oc_bt *bias,
                        oc_error *err);
    /* Row r < n of dst (rows of table->w.n_in floats from dst_off) = table row ids[r], converted to
     * f32, for ids[r] >= 0; rows with ids[r] < 0 are left alone. ids: int32, checked by the caller
     * to be < table->w.n_out. */
    oc_status (*embed)(oc_backend *be, const oc_bw *table, const oc_bt *ids, int64_t n, oc_bt *dst,
                       int64_t dst_off, oc_error *err);
    /* Per row r < n_rows of dim floats: x[r] += res[r] when res != NULL; then, when y != NULL,
     * y[r] = norm(x[r]) * w (+ b for LAYER; w, b may be NULL). y may be res. */
    oc_status (*norm)(oc_backend *be, oc_norm_kind kind, oc_bt *x, int64_t x_off, const oc_bt *res,
                      int64_t res_off, oc_bt *y, int64_t y_off, const oc_bt *w, const oc_bt *b,
                      int64_t n_rows, int64_t dim, float eps, oc_error *err);
    /* NEOX rotary (nn.h oc_rope_neox) on n_tok tokens of n_head heads of head_dim floats, rows
     * contiguous (token stride n_head * head_dim): pair k < n_pairs of token t turns by the
     * angle whose cos and sin are cos[t * n_pairs + k], sin[...]. */
    oc_status (*rope)(oc_backend *be, oc_bt *x, int64_t x_off, int64_t n_tok, int32_t n_head,
                      int32_t head_dim, int32_t n_pairs, const oc_bt *cos, const oc_bt *sin,
                      oc_error *err);
    /* dst[dst_off + i] = f16(src[src_off + i]) for i < n: the KV cache store (dst is f16). */
    oc_status (*kv_store)(oc_backend *be, const oc_bt *src, int64_t src_off, oc_bt *dst, int64_t dst_off,
                          int64_t n, oc_error *err);
    /* attn.h oc_attn_run of call on the buffers t; stats may be NULL. */
    oc_status (*attention)(oc_backend *be, const oc_attn_call *call, const oc_attn_bt *t, oc_attn_stats *stats,
                           oc_error *err);
    /* y[i] += x[i] for i < n. */
    oc_status (*add)(oc_backend *be, oc_bt *y, int64_t y_off, const oc_bt *x, int64_t x_off, int64_t n,
                     oc_error *err);
    /* x[i] = act(x[i]) for i < n. */
    oc_status (*act)(oc_backend *be, oc_bt *x, int64_t x_off, int64_t n, oc_act act, oc_error *err);
    /* g[i] = act(g[i]) * u[i] for i < n (SwiGLU with SiLU). */
    oc_status (*glu)(oc_backend *be, oc_bt *g, int64_t g_off, const oc_bt *u, int64_t u_off, int64_t n,
                     oc_act act, oc_error *err);
    /* dst row r = src row idx[r / unit] * unit + r % unit, for r < n_rows rows of dim floats
     * (idx: int32). Qwen2.5-VL's window order and its inverse. */
    oc_status (*gather_rows)(oc_backend *be, oc_bt *dst, int64_t dst_off, const oc_bt *src, int64_t src_off,
                             const oc_bt *idx, int64_t n_rows, int64_t dim, int32_t unit, oc_error *err);

    /* -- version 2 -- */
    /* KV cache compaction in place (kvcache/kv_cache.h): row kept[r] of the f16 rows at
     * t + off, stride_elems apart, row_elems long, moves to row r, for r < n_kept. kept is host
     * memory, ascending (so no row is overwritten before it is read). Rows past n_kept are left
     * as they are. */
    oc_status (*kv_keep)(oc_backend *be, oc_bt *t, int64_t off, int64_t stride_elems, int32_t row_elems,
                         const int32_t *kept, int32_t n_kept, oc_error *err);

    /* -- version 3 -- */
    /* (optional: NULL where the host scores and selects, kvcache/kv_select.c) one oc_kv_dev_op,
     * queued like every other operation. */
    oc_status (*kv_dev)(oc_backend *be, const oc_kv_dev_op *op, oc_error *err);
    /* (optional: NULL where write() does not wait, the CPU) write() queued like the operations:
     * src must stay unchanged until the next read() (or the device's finish). A device's write()
     * waits for every queued operation first. */
    oc_status (*write_queued)(oc_backend *be, oc_bt *t, size_t off_bytes, const void *src, size_t n_bytes,
                              oc_error *err);

    /* -- version 4 -- */
    /* (optional: NULL where a product per call costs nothing more, the CPU) n (1..3) products of the
     * same x in one operation, each as matmul: out[j].y = x out[j].w^T (+ out[j].bias); the weights
     * have one type and n_in (a device launches them together: q, k and v of a decode step). */
    oc_status (*matmul_n)(oc_backend *be, const oc_bt *x, int64_t x_off, int64_t x_stride, int64_t n_tok,
                          const oc_mm_out *out, int32_t n, oc_error *err);
    /* (optional, as matmul_n) one token: y = act(x gate^T) * (x up^T), both products and glu in one
     * operation (a decode step's MLP); gate and up of one type and shape, y gate->w.n_out floats. */
    oc_status (*matmul_glu)(oc_backend *be, const oc_bw *gate, const oc_bw *up, const oc_bt *x, int64_t x_off,
                            oc_bt *y, int64_t y_off, oc_act act, oc_error *err);
    /* (optional, as matmul_n) rope on q (n_head heads) and k (n_head_kv heads), then kv_store of k
     * and v: n_tok rows from element 0 of q, k, v (rows contiguous, as rope takes them), into the
     * f16 caches at k_dst and v_dst (elements; the rows contiguous there too). */
    oc_status (*rope_store)(oc_backend *be, oc_bt *q, oc_bt *k, const oc_bt *v, int64_t n_tok, int32_t n_head,
                            int32_t n_head_kv, int32_t head_dim, int32_t n_pairs, const oc_bt *cos, const oc_bt *sin,
                            oc_bt *k_cache, int64_t k_dst, oc_bt *v_cache, int64_t v_dst, oc_error *err);
    /* (optional: NULL where attention() adds its counts before it returns, the CPU) adds the
     * counts that attention() deferred into the stats those calls were given: a device sums a
     * sparse call's counters where they are instead of waiting to read them. read() (and
     * map_read()) does this first, and a call given other stats does it for the earlier ones; the
     * stats a call is given must stay alive until then: the models call this at the end of each
     * forward pass. */
    oc_status (*attn_stats_flush)(oc_backend *be, oc_error *err);

    /* -- version 5: a device's decode step with its norms inside the products (the residual
     *    adds go into the products before them, so the normalized row is not written out) -- */
    /* (optional: NULL on the CPU) one token: y += x w^T (+ bias), the product added to y as add()
     * would add it (the output projection and the MLP's down projection into the residual). */
    oc_status (*matmul_acc)(oc_backend *be, const oc_bw *w, const oc_bt *x, int64_t x_off, oc_bt *y, int64_t y_off,
                            const oc_bt *bias, oc_error *err);
    /* (optional: NULL on the CPU) one token: matmul_n (glu < 0) or matmul_glu (glu: the oc_act,
     * out[0] gate into out[0].y, out[1] up) of x' = norm(x) * norm_w, the RMSNorm (eps) that norm()
     * computes, without writing x' (x is only read). OC_ERR_UNSUPPORTED: not for this shape (the
     * caller runs norm() and the products instead). */
    oc_status (*norm_matmul)(oc_backend *be, const oc_bt *x, int64_t x_off, const oc_bt *norm_w, float eps,
                             const oc_mm_out *out, int32_t n, int glu, oc_error *err);
} oc_backend_ops;

/* Every implementation's instance starts with this. */
struct oc_backend {
    const oc_backend_ops *ops;
};

/* The kind a public oc_backend_choice (ocellus.h) selects in this build: OC_BACKEND_AUTO gives
 * OpenCL when it is built in (the caller falls back to the CPU when the device does not open).
 * [errors: OC_ERR_INVALID (unknown value), OC_ERR_UNSUPPORTED (OpenCL not built in)] */
oc_status oc_backend_resolve(int choice, const char *device, oc_backend_kind *out, oc_error *err);

/* Host bytes an instance takes from its allocator for itself (scratch; not the buffers), with
 * n_threads pool threads, oc_mem_alloc's headers included: on CPU exactly what
 * oc_backend_open allocates; 0 on overflow. OpenCL: its tables and bookkeeping (not the
 * driver's memory). [alloc: no] */
size_t oc_backend_bytes(const oc_backend_spec *spec, const oc_backend_limits *lim, int n_threads);
/* Host bytes a buffer of n_bytes with flags takes from the allocator on kind (0 for an empty
 * buffer): on CPU one oc_mem_alloc block (n_bytes + its header), 0 for OC_BT_HOST there (bound
 * to caller memory); on a device the buffer's host handle. */
size_t oc_backend_buffer_bytes(oc_backend_kind kind, size_t n_bytes, uint32_t flags);
/* Host bytes one weight or 1-D tensor handed over with ops->weight / ops->import (with data)
 * takes: 0 on CPU (it reads the model's memory in place), a buffer handle on a device. */
size_t oc_backend_tensor_bytes(oc_backend_kind kind);
/* Host bytes oc_backend_device_open takes for kind (0 on CPU: there is no device). */
size_t oc_backend_device_host_bytes(oc_backend_kind kind);

/* [alloc: yes, once] [errors: OC_ERR_INVALID, OC_ERR_UNSUPPORTED (kind, isa), OC_ERR_NOMEM] */
oc_status oc_backend_open(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                          const oc_allocator *alloc, oc_error *err);
void oc_backend_close(oc_backend *be);   /* NULL is a no-op */

/* ---- providers ---------------------------------------------------------------------------------- */

/* One implementation of this interface, as an os_*.c registers a VFS with SQLite: backend.c finds
 * a kind's provider in its table and dispatches through it, naming no implementation's header (the
 * floors stay one-way: opencl/ sits above backend/). A third backend is one more provider and one
 * more row in that table. Members marked (optional) may be NULL, as said there. */
typedef struct oc_backend_provider {
    oc_backend_kind kind;
    const char *name;                    /* for people: "CPU", "OpenCL" */
    /* host bytes an instance takes (oc_backend_bytes) */
    size_t (*bytes)(const oc_backend_spec *spec, const oc_backend_limits *lim, int n_threads);
    oc_status (*open)(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                      const oc_allocator *alloc, oc_error *err);
    /* What the provider's attention executes sparse, per head pattern kind (pattern.h): what
     * `ocellus plan` reports per backend. */
    oc_pattern_exec (*pattern_exec)(oc_pattern_kind kind);
    /* (optional) the host handle of one device buffer or weight (oc_backend_tensor_bytes); NULL:
     * buffers are host memory (the CPU's accounting in oc_backend_buffer_bytes) */
    size_t (*buffer_host_bytes)(void);
    /* (optional, all or none) a device shared by instances; NULL: the kind has none, and
     * oc_backend_device_open gives NULL. A device's struct begins with oc_backend_device_head. */
    oc_status (*device_open)(oc_backend_device **out, const char *selector, const oc_allocator *alloc,
                             oc_error *err);
    void (*device_close)(oc_backend_device *dev);
    const char *(*device_name)(const oc_backend_device *dev);
    size_t (*device_bytes)(const oc_backend_device *dev);
    oc_status (*device_finish)(oc_backend_device *dev, oc_error *err);
    size_t (*device_host_bytes)(void);   /* what device_open takes from the allocator */
} oc_backend_provider;

/* The first member of every provider's device struct, so that a device names its provider. */
typedef struct oc_backend_device_head {
    const oc_backend_provider *provider;
} oc_backend_device_head;

/* The provider of kind in this build, or NULL when it is not built in. [alloc: no] */
const oc_backend_provider *oc_backend_provider_find(oc_backend_kind kind);

/* The providers, each defined by its implementation; backend.c's table lists those this build
 * links (OpenCL: only with OC_HAVE_OPENCL, not in the fuzz targets). */
extern const oc_backend_provider oc_backend_cpu_provider;      /* backend_cpu.c */
extern const oc_backend_provider oc_backend_opencl_provider;   /* opencl/cl_backend.c */


/* An optional buffer: NULL when absent (or t is NULL), so it can be passed as an op's optional operand. */
static inline const oc_bt *oc_bt_opt(const oc_bt *t) { return t && t->n_bytes ? t : NULL; }

#endif
