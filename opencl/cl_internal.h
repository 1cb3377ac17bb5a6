/* cl_internal.h: the OpenCL objects behind cl_device.h's handles, shared by the src/cl_*.c files
 * only (they are the one place that includes CL/cl.h). */
#ifndef OC_CL_INTERNAL_H
#define OC_CL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "opencl/cl_device.h"

#define OC_CL_MAX_PROGRAMS 3   /* cl_device.c: the rest, the attention program, its 64-row build */
#define OC_CL_PROF_EVENTS 4096 /* launches profiled between two harvests (a decode token: ~500) */

/* What the profile sums over the intervals of one class (cl_device.c "Profile"). */
typedef struct oc_cl_prof_sums {
    uint64_t n_intervals, n_launches, n_waits;
    uint64_t busy_ns, span_ns, wall_ns, wait_ns, enqueue_ns;
    uint64_t kernel_n[OC_CLK_COUNT], kernel_ns[OC_CLK_COUNT];
} oc_cl_prof_sums;

/* OCELLUS_CL_PROFILE=FILE at open: the queue records every launch's event; each wait (a download,
 * oc_cl_finish) closes an interval whose events are read here. Allocated at open, so profiling
 * adds no allocation per launch. */
typedef struct oc_cl_prof {
    char path[512];
    cl_event ev[OC_CL_PROF_EVENTS];
    unsigned char kid[OC_CL_PROF_EVENTS];
    int n_ev;
    int batch;                    /* the open interval launched a batch kernel (oc_gemm, CLBlast) */
    uint64_t t_open_ns;           /* host clock when the open interval began (the previous wait's end) */
    oc_cl_prof_sums cur, cls[2];  /* cur: the open interval; cls[0] one-token intervals, cls[1] batches */
} oc_cl_prof;

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
    int clblast_ran;              /* CLBlast cached programs for this context (oc_cl_close drops them) */
    oc_cl_prof *prof;             /* NULL unless OCELLUS_CL_PROFILE named a file at open */
    uint64_t n_waits;             /* downloads, blocking uploads and finishes so far (oc_cl_wait_count) */
};

struct oc_cl_buf {
    oc_cl_device *dev;
    cl_mem mem;
    size_t n_bytes;
};

/* Drops what the matrix products cached for dev's context (cl_matmul.c); oc_cl_close calls it. */
void oc_cl_matmul_close(oc_cl_device *dev);

/* "CL_OUT_OF_RESOURCES" etc., or "error N". */
const char *oc_cl_err_name(cl_int code);

#endif
