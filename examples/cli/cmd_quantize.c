/* cmd_quantize.c: `ocellus quantize IN.gguf OUT.gguf --type q8_0|q4_0`: a GGUF file (text model or
 * mmproj) with its matrices quantized (examples/tools/quantize.c), for files that exist only as
 * GGUF (an F16 mmproj from the web, the demo model). */
#include "tools/tools.h"
#include "tools/quantize.h"
#include "core/dtype.h"
#include "port.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus quantize IN.gguf OUT.gguf [--type q8_0|q4_0]\n"
            "  IN.gguf     a text model or mmproj GGUF (F32 / F16 / BF16 matrices)\n"
            "  --type T    the matrices' new type (default q8_0); norms, biases, 1-D tensors, an mmproj's\n"
            "              patch kernels and position embeddings, and already quantized tensors are\n"
            "              copied as they are\n");
}

int oc_tool_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = "q8_0";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        if (!strcmp(argv[i], "--type") && i + 1 < argc) type = argv[++i];
        else if (argv[i][0] != '-' && !in) in = argv[i];
        else if (argv[i][0] != '-' && !out) out = argv[i];
        else {
            fprintf(stderr, "ocellus quantize: unexpected argument '%s' (ocellus quantize --help lists the options)\n",
                    argv[i]);
            return 2;
        }
    }
    int32_t dtype = !strcmp(type, "q8_0") ? OC_DTYPE_Q8_0 : !strcmp(type, "q4_0") ? OC_DTYPE_Q4_0 : -1;
    if (dtype < 0) {
        fprintf(stderr, "ocellus quantize: --type must be q8_0 or q4_0, not '%s'\n", type);
        return 2;
    }
    if (!in || !out) { usage(stderr); return 2; }
    if (!strcmp(in, out)) {
        fprintf(stderr, "ocellus quantize: the output must be another file than the input\n");
        return 2;
    }
    oc_error e;
    int64_t n_quant = 0, n_t = 0;
    uint64_t t0 = oc_port_now_ns();
    oc_status st = oc_quantize_gguf(in, out, dtype, &n_quant, &n_t, &e);
    if (!st)
        printf("%s: %lld of %lld tensors quantized to %s in %.1f s\n", out, (long long)n_quant, (long long)n_t,
               oc_dtype_name(dtype), (double)(oc_port_now_ns() - t0) * 1e-9);
    else fprintf(stderr, "ocellus quantize: %s\n", e.message);
    return st ? 1 : 0;
}
