/* cl_kvsel.h: a shrinking KV cache's scoring, selection and compaction on an OpenCL device
 * (backend.h oc_kv_dev_op; kernels opencl/kernels/kvsel.cl). cl_backend.c's kv_dev operation. */
#ifndef OC_CL_KVSEL_H
#define OC_CL_KVSEL_H

#include "backend/backend.h"
#include "opencl/cl_device.h"

/* Queues op on dev; nothing waits. [alloc: no] [errors: OC_ERR_INVALID (an operand outside its
 * buffer, a head_dim above 128, rows not a whole number of 32-bit words), OC_ERR_DEVICE] */
oc_status oc_cl_kv_dev(oc_cl_device *dev, const oc_kv_dev_op *op, oc_error *err);

#endif
