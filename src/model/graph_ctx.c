/* graph_ctx.c: the end of a graph context (graph_ctx.h). */
#include "model/graph_ctx.h"

void oc_graph_ctx_free(void *ctx, size_t self_bytes, oc_backend *be, int32_t n_layers, oc_graph_tensors_fn list,
                       oc_allocator alloc, void *host, size_t host_bytes) {
    if (be) {
        oc_bt *t[OC_GRAPH_MAX_TENSORS];
        for (int32_t il = -1; il < n_layers; il++) {
            int n = list(ctx, il, t);
            for (int i = 0; i < n; i++) be->ops->free(be, t[i]);
        }
        oc_backend_close(be);
    }
    if (host) oc_mem_free(&alloc, host, host_bytes);
    oc_mem_free(&alloc, ctx, self_bytes);
}
