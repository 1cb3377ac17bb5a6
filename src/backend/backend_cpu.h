/* backend_cpu.h: the CPU backend's instance, shared by backend_cpu.c (lifecycle, memory,
 * transfers, matmul, attention) and backend_cpu_rows.c (the per-row and elementwise operations as
 * pool tasks). Nothing outside those two files and backend.c includes it. */
#ifndef OC_BACKEND_CPU_H
#define OC_BACKEND_CPU_H

#include "backend/backend.h"

typedef struct oc_backend_cpu {
    oc_backend base;             /* first: the ops table */
    oc_allocator alloc;
    oc_pool *pool;               /* borrowed; NULL: serial */
    oc_isa isa;
    oc_matmul_ctx *mm;
    void *attn_scratch;          /* OC_MEM_ALIGN-aligned, attn_scratch_bytes */
    size_t attn_scratch_bytes;
    void *dyn_mem;               /* the per-prompt index of VERTICAL_SLASH / GRID heads (attention/dyn.h),
                                    OC_MEM_ALIGN-aligned, dyn_bytes; NULL when no call reaches 64 queries */
    size_t dyn_bytes;
} oc_backend_cpu;

size_t oc_backend_cpu_bytes(const oc_backend_limits *lim, int n_threads, oc_isa isa);
oc_status oc_backend_cpu_open(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                              const oc_allocator *alloc, oc_error *err);

/* The data of t at element offset off of elem_bytes each, or NULL (with err set) when
 * [off, off + n) does not lie inside t: a graph bug caught before it becomes a wild access. */
void *oc_bt_cpu_span(const oc_bt *t, int64_t off, int64_t n, size_t elem_bytes, const char *op, oc_error *err);

/* backend_cpu_rows.c */
oc_status oc_cpu_kv_keep(oc_backend *be, oc_bt *t, int64_t off, int64_t stride_elems, int32_t row_elems,
                         const int32_t *kept, int32_t n_kept, oc_error *err);
oc_status oc_cpu_embed(oc_backend *be, const oc_bw *table, const oc_bt *ids, int64_t n, oc_bt *dst,
                       int64_t dst_off, oc_error *err);
oc_status oc_cpu_norm(oc_backend *be, oc_norm_kind kind, oc_bt *x, int64_t x_off, const oc_bt *res,
                      int64_t res_off, oc_bt *y, int64_t y_off, const oc_bt *w, const oc_bt *b,
                      int64_t n_rows, int64_t dim, float eps, oc_error *err);
oc_status oc_cpu_rope(oc_backend *be, oc_bt *x, int64_t x_off, int64_t n_tok, int32_t n_head,
                      int32_t head_dim, int32_t n_pairs, const oc_bt *cos, const oc_bt *sin, oc_error *err);
oc_status oc_cpu_kv_store(oc_backend *be, const oc_bt *src, int64_t src_off, oc_bt *dst, int64_t dst_off,
                          int64_t n, oc_error *err);
oc_status oc_cpu_add(oc_backend *be, oc_bt *y, int64_t y_off, const oc_bt *x, int64_t x_off, int64_t n,
                     oc_error *err);
oc_status oc_cpu_act(oc_backend *be, oc_bt *x, int64_t x_off, int64_t n, oc_act act, oc_error *err);
oc_status oc_cpu_glu(oc_backend *be, oc_bt *g, int64_t g_off, const oc_bt *u, int64_t u_off, int64_t n,
                     oc_act act, oc_error *err);
oc_status oc_cpu_gather_rows(oc_backend *be, oc_bt *dst, int64_t dst_off, const oc_bt *src, int64_t src_off,
                             const oc_bt *idx, int64_t n_rows, int64_t dim, int32_t unit, oc_error *err);

#endif
