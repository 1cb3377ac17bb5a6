/* graph_ctx.h: what the two graph contexts (text_ctx.c, vision_ctx.c) share: opening on the CPU
 * alone, and the end of their life, which frees every backend tensor they hold, closes the backend
 * and frees their host memory. Each context says which tensors it holds; the order of the rest is
 * here once. */
#ifndef OC_GRAPH_CTX_H
#define OC_GRAPH_CTX_H

#include "backend/backend.h"

/* The CPU backend with pool's threads and isa's kernels: a graph context opened without a device. */
static inline oc_backend_spec oc_graph_cpu_spec(oc_pool *pool, oc_isa isa) {
    oc_backend_spec spec = { OC_BACKEND_KIND_CPU, NULL, pool, isa, NULL };
    return spec;
}

/* Most tensors one call of an oc_graph_tensors_fn lists. */
#define OC_GRAPH_MAX_TENSORS 32

/* Writes to out the backend tensors of a graph context ctx: layer il's for il >= 0, the context's
 * own (buffers, weights outside the layers) for il == -1; returns how many (<= OC_GRAPH_MAX_TENSORS).
 * A tensor never made is zeroed, and freeing it is a no-op. */
typedef int (*oc_graph_tensors_fn)(void *ctx, int32_t il, oc_bt **out);

/* The end of a graph context: every tensor list names on be (the context's own, then layers
 * 0 .. n_layers - 1) freed and be closed (be may be NULL: nothing was opened on it), then host_bytes
 * at host (may be NULL) and self_bytes at ctx freed from alloc. */
void oc_graph_ctx_free(void *ctx, size_t self_bytes, oc_backend *be, int32_t n_layers, oc_graph_tensors_fn list,
                       oc_allocator alloc, void *host, size_t host_bytes);

#endif
