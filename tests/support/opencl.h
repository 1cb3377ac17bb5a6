/* opencl.h: running a test's cases on the OpenCL backend as well as the CPU (tests/support/opencl.c).
 * A case asks check_opencl_missing() first and skips with its answer; when a device is listed
 * the case runs, so a device that is there but does not open (a program that fails to build)
 * fails it. OC_TEST_OPENCL_DEVICE=N|NAME picks the device (as oc_context_params.device); when it
 * is set the cases never skip. */
#ifndef OC_TEST_OPENCL_H
#define OC_TEST_OPENCL_H

/* NULL when an OpenCL device is listed (or OC_TEST_OPENCL_DEVICE is set), else why the OpenCL
 * cases skip: the build has no OpenCL, or the ICD loader finds no platform or no device (e.g.
 * OCL_ICD_VENDORS=/nonexistent). */
const char *check_opencl_missing(void);
/* OC_TEST_OPENCL_DEVICE, or NULL: the backend's default device. */
const char *check_opencl_device(void);

#endif
