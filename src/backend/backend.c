/* backend.c: choosing and opening a backend (backend.h): maps the public oc_backend_choice of
 * oc_context_params to a kind this build has, and dispatches open, size queries and the shared
 * device to the implementation (backend_cpu.c; cl_backend.c when the build has OpenCL). Nothing
 * here runs an operation. */
#include "backend/backend.h"
#include "backend/backend_cpu.h"

/* Whether opencl/ host code are linked: the fuzz targets (Makefile FUZZ_LIB_SRC, -DOC_FUZZING) compile
 * the portable sources only, whatever config.h says (as isa_built.h does for the ISA kernels). */
#if OC_HAVE_OPENCL && !defined(OC_FUZZING)
#define OC_BUILT_OPENCL 1
#include "opencl/cl_backend.h"
#else
#define OC_BUILT_OPENCL 0
#endif

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
        *out = OC_BUILT_OPENCL ? OC_BACKEND_KIND_OPENCL : OC_BACKEND_KIND_CPU;
        return OC_OK;
    case OC_BACKEND_OPENCL:
        if (!OC_BUILT_OPENCL) return not_built(err);
        *out = OC_BACKEND_KIND_OPENCL;
        return OC_OK;
    default:
        return oc_fail(err, OC_ERR_INVALID, "backend: unknown backend choice %d", choice);
    }
}

oc_status oc_backend_device_open(oc_backend_device **out, oc_backend_kind kind, const char *selector,
                                 const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (kind == OC_BACKEND_KIND_CPU) return OC_OK;
#if OC_BUILT_OPENCL
    if (kind == OC_BACKEND_KIND_OPENCL) return oc_cl_backend_device_open(out, selector, alloc, err);
#else
    (void)selector;
    (void)alloc;
#endif
    return kind == OC_BACKEND_KIND_OPENCL ? not_built(err)
                                          : oc_fail(err, OC_ERR_INVALID, "backend: unknown kind %d", (int)kind);
}

void oc_backend_device_close(oc_backend_device *dev) {
#if OC_BUILT_OPENCL
    oc_cl_backend_device_close(dev);
#else
    (void)dev;   /* never opened without OpenCL */
#endif
}

const char *oc_backend_device_name(const oc_backend_device *dev) {
#if OC_BUILT_OPENCL
    if (dev) return oc_cl_backend_device_name(dev);
#endif
    (void)dev;
    return "CPU";
}

size_t oc_backend_device_bytes(const oc_backend_device *dev) {
#if OC_BUILT_OPENCL
    if (dev) return oc_cl_backend_device_bytes(dev);
#endif
    (void)dev;
    return 0;
}

oc_status oc_backend_device_finish(oc_backend_device *dev, oc_error *err) {
#if OC_BUILT_OPENCL
    if (dev) return oc_cl_backend_device_finish(dev, err);
#endif
    (void)dev;
    (void)err;
    return OC_OK;
}

size_t oc_backend_bytes(const oc_backend_spec *spec, const oc_backend_limits *lim, int n_threads) {
    if (spec->kind == OC_BACKEND_KIND_CPU) return oc_backend_cpu_bytes(lim, n_threads, spec->isa);
#if OC_BUILT_OPENCL
    if (spec->kind == OC_BACKEND_KIND_OPENCL) return oc_cl_backend_bytes(lim);
#endif
    return 0;
}

size_t oc_backend_buffer_bytes(oc_backend_kind kind, size_t n_bytes, uint32_t flags) {
    size_t total = 0;
    if (!n_bytes) return 0;
    if (kind != OC_BACKEND_KIND_CPU) return oc_backend_tensor_bytes(kind);
    if (flags & OC_BT_HOST) return 0;
    return oc_add_block(&total, n_bytes) ? total : SIZE_MAX;   /* one oc_mem_alloc block */
}

size_t oc_backend_tensor_bytes(oc_backend_kind kind) {
#if OC_BUILT_OPENCL
    if (kind == OC_BACKEND_KIND_OPENCL) return oc_cl_backend_buffer_host_bytes();
#endif
    (void)kind;
    return 0;
}

size_t oc_backend_device_host_bytes(oc_backend_kind kind) {
#if OC_BUILT_OPENCL
    if (kind == OC_BACKEND_KIND_OPENCL) return oc_cl_backend_device_host_bytes();
#endif
    (void)kind;
    return 0;
}

oc_status oc_backend_open(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                          const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (spec->kind == OC_BACKEND_KIND_CPU) return oc_backend_cpu_open(out, spec, lim, alloc, err);
#if OC_BUILT_OPENCL
    if (spec->kind == OC_BACKEND_KIND_OPENCL) return oc_cl_backend_open(out, spec, lim, alloc, err);
#endif
    return oc_fail(err, OC_ERR_UNSUPPORTED, "backend: kind %d is not available in this build", (int)spec->kind);
}

void oc_backend_close(oc_backend *be) {
    if (be) be->ops->close(be);
}
