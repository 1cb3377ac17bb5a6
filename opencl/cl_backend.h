/* cl_backend.h: the OpenCL implementation of backend.h (cl_backend.c), which backend.c reaches
 * through its provider (oc_backend_opencl_provider) when the build has OpenCL (OC_HAVE_OPENCL);
 * nothing but cl_backend.c includes this header. The shared
 * device (oc_backend_device) is defined in cl_backend.c: OpenCL is the only kind that has one. */
#ifndef OC_CL_BACKEND_H
#define OC_CL_BACKEND_H

#include "backend/backend.h"

oc_status oc_cl_backend_device_open(oc_backend_device **out, const char *selector, const oc_allocator *alloc,
                                    oc_error *err);
void oc_cl_backend_device_close(oc_backend_device *dev);
const char *oc_cl_backend_device_name(const oc_backend_device *dev);
size_t oc_cl_backend_device_bytes(const oc_backend_device *dev);
oc_status oc_cl_backend_device_finish(oc_backend_device *dev, oc_error *err);
size_t oc_cl_backend_device_host_bytes(void);   /* what oc_cl_backend_device_open takes (host) */
size_t oc_cl_backend_buffer_host_bytes(void);   /* the host handle of one device buffer or weight */

size_t oc_cl_backend_bytes(const oc_backend_limits *lim);
oc_status oc_cl_backend_open(oc_backend **out, const oc_backend_spec *spec, const oc_backend_limits *lim,
                             const oc_allocator *alloc, oc_error *err);

#endif
