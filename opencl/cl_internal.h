/* cl_internal.h: the OpenCL objects behind cl_device.h's handles, shared by the src/cl_*.c files
 * only (they are the one place that includes CL/cl.h). */
#ifndef OC_CL_INTERNAL_H
#define OC_CL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "opencl/cl_device.h"

#define OC_CL_MAX_PROGRAMS 2   /* cl_device.c: the attention program and the rest */

struct oc_cl_device {
    const oc_allocator *alloc;
    oc_cl_caps caps;
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    int n_programs;
    cl_program programs[OC_CL_MAX_PROGRAMS];
    cl_kernel kernels[OC_CLK_COUNT];
    size_t kernel_wg[OC_CLK_COUNT];
    int use_clblast;
};

struct oc_cl_buf {
    oc_cl_device *dev;
    cl_mem mem;
    size_t n_bytes;
};

/* "CL_OUT_OF_RESOURCES" etc., or "error N". */
const char *oc_cl_err_name(cl_int code);

#endif
