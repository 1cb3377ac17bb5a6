/* opencl.c: whether the OpenCL cases run here (opencl.h), and the LeakSanitizer suppressions every
 * test program needs once it opens an OpenCL device (toolchain notes §1: the driver stack keeps
 * allocations until exit). */
#include "support/opencl.h"

#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>

#if OC_HAVE_OPENCL
#include "opencl/cl_device.h"
#endif

/* LeakSanitizer reads this at start-up when the program is sanitized (harmless otherwise).
 * libstdc++: ocellus is C, so an allocation through operator new is the driver stack's (PoCL's
 * C++ runtime); LeakSanitizer's fast unwinder sometimes stops at operator new (2 frames, seen once
 * in test_long's PoCL parity case), so the library frames above cannot name it. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:libpocl.so\nleak:libLLVM-15.so\nleak:libclang-cpp.so\nleak:libpocl-devices-pthread.so\n"
           "leak:libOpenCL.so\nleak:libclblast.so\nleak:libstdc++.so\n";
}

const char *check_opencl_device(void) {
    const char *d = getenv("OC_TEST_OPENCL_DEVICE");
    return d && *d ? d : NULL;
}

const char *check_opencl_missing(void) {
#if OC_HAVE_OPENCL
    static char why[OC_ERROR_MESSAGE_BYTES + 32];
    if (check_opencl_device()) return NULL;
    oc_cl_caps caps;
    oc_error e;
    if (oc_cl_select(NULL, &caps, &e) == OC_OK) return NULL;
    snprintf(why, sizeof why, "no OpenCL device: %s", e.message);
    return why;
#else
    return "built without OpenCL (./configure found no CL/cl.h and -lOpenCL)";
#endif
}
