/* backend.c: choosing and opening a backend (backend.h): maps the public oc_backend_choice of
 * oc_context_params to a kind this build has, and dispatches open, size queries and the shared
 * device through the providers' table (backend.h oc_backend_provider: backend_cpu.c's; OpenCL's
 * when the build has it). It names no implementation's header. Nothing here runs an operation. */
#include "backend/backend.h"

/* Whether opencl/ host code are linked: the fuzz targets (Makefile FUZZ_LIB_SRC, -DOC_FUZZING) compile
 * the portable sources only, whatever config.h says (as isa_built.h does for the ISA kernels). */
#if OC_HAVE_OPENCL && !defined(OC_FUZZING)
#define OC_BUILT_OPENCL 1
#else
#define OC_BUILT_OPENCL 0
#endif

/* The providers this build links: the one table of backends. */
static const oc_backend_provider *const providers[] = {
    &oc_backend_cpu_provider,
#if OC_BUILT_OPENCL
    &oc_backend_opencl_provider,
#endif
};

const oc_backend_provider *oc_backend_provider_find(oc_backend_kind kind) {
    for (size_t i = 0; i < sizeof providers / sizeof providers[0]; i++)
        if (providers[i]->kind == kind) return providers[i];
    return NULL;
}

/* The provider of an open device (NULL for the CPU's NULL device). */
static const oc_backend_provider *device_provider(const oc_backend_device *dev) {
    return dev ? ((const oc_backend_device_head *)(const void *)dev)->provider : NULL;
}

static oc_status not_built(oc_error *err) {
    return oc_fail(err, OC_ERR_UNSUPPORTED, "backend: OpenCL backend not built in (configure --enable-opencl "
                   "with an OpenCL ICD loader and headers; or use the CPU backend)");
}

oc_status oc_backend_resolve(int choice, const char *device, oc_backend_kind *out, oc_error *err) {
    (void)device;   /* read when the device opens */
    switch (choice) {
    case OC_BACKEND_CPU:
        *out = OC_BACKEND_KIND_CPU;
        return OC_OK;
    case OC_BACKEND_AUTO:
        *out = oc_backend_provider_find(OC_BACKEND_KIND_OPENCL) ? OC_BACKEND_KIND_OPENCL : OC_BACKEND_KIND_CPU;
        return OC_OK;
    case OC_BACKEND_OPENCL:
        if (!oc_backend_provider_find(OC_BACKEND_KIND_OPENCL)) return not_built(err);
        *out = OC_BACKEND_KIND_OPENCL;
        return OC_OK;
    default:
        return oc_fail(err, OC_ERR_INVALID, "backend: unknown backend choice %d", choice);
    }
}

oc_status oc_backend_device_open(oc_backend_device **out, oc_backend_kind kind, const char *selector,
                                 const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    const oc_backend_provider *p = oc_backend_provider_find(kind);
    if (p && !p->device_open) return OC_OK;   /* nothing to share (the CPU) */
    if (p) return p->device_open(out, selector, alloc, err);
    return kind == OC_BACKEND_KIND_OPENCL ? not_built(err)
                                          : oc_fail(err, OC_ERR_INVALID, "backend: unknown kind %d", (int)kind);
}

void oc_backend_device_close(oc_backend_device *dev) {
    const oc_backend_provider *p = device_provider(dev);
    if (p) p->device_close(dev);
}

const char *oc_backend_device_name(const oc_backend_device *dev) {
    const oc_backend_provider *p = device_provider(dev);
    return p ? p->device_name(dev) : "CPU";
}

size_t oc_backend_device_bytes(const oc_backend_device *dev) {
    const oc_backend_provider *p = device_provider(dev);
    return p ? p->device_bytes(dev) : 0;
}

oc_status oc_backend_device_finish(oc_backend_device *dev, oc_error *err) {
    const oc_backend_provider *p = device_provider(dev);
    return p ? p->device_finish(dev, err) : OC_OK;
}

size_t oc_backend_bytes(const oc_backend_spec *spec, const oc_backend_limits *lim, int n_threads) {
    const oc_backend_provider *p = oc_backend_provider_find(spec->kind);
    return p ? p->bytes(spec, lim, n_threads) : 0;
}

size_t oc_backend_buffer_bytes(oc_backend_kind kind, size_t n_bytes, uint32_t flags) {
    size_t total = 0;
    if (!n_bytes) return 0;
    if (kind != OC_BACKEND_KIND_CPU) return oc_backend_tensor_bytes(kind);
    if (flags & OC_BT_HOST) return 0;
    return oc_add_block(&total, n_bytes) ? total : SIZE_MAX;   /* one oc_mem_alloc block */
}

size_t oc_backend_tensor_bytes(oc_backend_kind kind) {
    const oc_backend_provider *p = oc_backend_provider_find(kind);
    return p && p->buffer_host_bytes ? p->buffer_host_bytes() : 0;
}

size_t oc_backend_device_host_bytes(oc_backend_kind kind) {
    const oc_backend_provider *p = oc_backend_provider_find(kind);
    return p && p->device_host_bytes ? p->device_host_bytes() : 0;
}

oc_status oc_backend_open(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                          const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    const oc_backend_provider *p = oc_backend_provider_find(spec->kind);
    if (p) return p->open(out, spec, lim, alloc, err);
    return oc_fail(err, OC_ERR_UNSUPPORTED, "backend: kind %d is not available in this build", (int)spec->kind);
}

void oc_backend_close(oc_backend *be) {
    if (be) be->ops->close(be);
}
