/* cmd_version.c: `ocellus version`: version, build features and the kernels this CPU will use. */
#include "tools/tools.h"
#include <string.h>
#include "config.h"
#include "core/isa.h"
#include "kernels/matmul.h"
#include "ocellus.h"
#include "port.h"

#include <stdio.h>

int oc_tool_version(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h")) {   /* nothing to ignore silently */
        fprintf(stderr, "ocellus version: unexpected argument '%s' (it takes none)\n", argv[1]);
        return 2;
    }
    oc_cpu_features f;
    oc_port_cpu_features(&f);
    printf("ocellus %s\n", OC_VERSION_STRING);
    printf("build: avx2=%d avx512=%d neon=%d opencl=%d clblast=%d sleef=%d libjpeg=%d libpng=%d\n",
           OC_HAVE_AVX2_KERNELS, OC_HAVE_AVX512_KERNELS, OC_HAVE_NEON_KERNELS, OC_HAVE_OPENCL,
           OC_HAVE_CLBLAST, OC_HAVE_SLEEF, OC_HAVE_LIBJPEG, OC_HAVE_LIBPNG);
    oc_isa isa = oc_isa_best(&f);
    const oc_matmul_kernels *mm = oc_matmul_kernels_for(isa);
    printf("cpu: %s, %d threads, kernels: %s (matmul: %s)\n", f.vendor, oc_port_n_cpus(), oc_isa_name(isa),
           mm ? oc_matmul_kernels_name(mm) : "none");
    return 0;
}
