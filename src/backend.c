/* backend.c: choosing and opening a backend (backend.h): maps the public oc_backend_choice of
 * oc_context_params to a kind this build has, and dispatches open and size queries to the
 * implementation. Nothing here runs an operation. */
#include "backend.h"
#include "backend_cpu.h"

oc_status oc_backend_resolve(int choice, const char *device, oc_backend_kind *out, oc_error *err) {
    (void)device;   /* names an OpenCL device; read once the OpenCL backend is wired */
    switch (choice) {
    case OC_BACKEND_CPU:
    case OC_BACKEND_AUTO:   /* no device backend to prefer yet */
        *out = OC_BACKEND_KIND_CPU;
        return OC_OK;
    case OC_BACKEND_OPENCL:
        return oc_fail(err, OC_ERR_UNSUPPORTED, OC_HAVE_OPENCL
                       ? "backend: the OpenCL backend is not wired to the model yet (use the CPU backend)"
                       : "backend: OpenCL backend not built in (configure --enable-opencl; use the CPU backend)");
    default:
        return oc_fail(err, OC_ERR_INVALID, "backend: unknown backend choice %d", choice);
    }
}

size_t oc_backend_bytes(const oc_backend_spec *spec, const oc_backend_limits *lim, int n_threads) {
    return spec->kind == OC_BACKEND_KIND_CPU ? oc_backend_cpu_bytes(lim, n_threads, spec->isa) : 0;
}

size_t oc_backend_buffer_bytes(oc_backend_kind kind, size_t n_bytes, uint32_t flags) {
    if (kind != OC_BACKEND_KIND_CPU || (flags & OC_BT_HOST)) return 0;
    size_t padded = (n_bytes + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN;
    return padded < n_bytes ? SIZE_MAX : padded;
}

oc_status oc_backend_open(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                          const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (spec->kind == OC_BACKEND_KIND_CPU) return oc_backend_cpu_open(out, spec, lim, alloc, err);
    return oc_fail(err, OC_ERR_UNSUPPORTED, "backend: kind %d is not available in this build", (int)spec->kind);
}

void oc_backend_close(oc_backend *be) {
    if (be) be->ops->close(be);
}
