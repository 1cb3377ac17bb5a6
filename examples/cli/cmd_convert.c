/* cmd_convert.c: `ocellus convert HF_DIR -o OUT_PREFIX [--type T]`: a Hugging Face Qwen2-VL /
 * Qwen2.5-VL checkpoint directory -> OUT_PREFIX.gguf (text) + OUT_PREFIX-mmproj.gguf (vision), as
 * llama.cpp's convert_hf_to_gguf.py writes them (examples/tools/convert.h). Prints what it wrote, the time it
 * took and the peak memory. */
#include "tools/tools.h"
#include "tools/convert.h"
#include "port.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus convert HF_DIR -o OUT_PREFIX [--type f32|f16|bf16|q8_0|q4_0]\n"
            "  HF_DIR       config.json, model.safetensors (or model.safetensors.index.json + shards),\n"
            "               tokenizer.json, tokenizer_config.json, preprocessor_config.json\n"
            "               [, chat_template.json]\n"
            "  -o PREFIX    writes PREFIX.gguf (text model) and PREFIX-mmproj.gguf (vision projector)\n"
            "  --type T     2-D weights as T (default f16); 1-D tensors and norms stay f32; patch\n"
            "               kernels are f16 for f16, else f32 (as llama.cpp's converter)\n");
}

int oc_tool_convert(int argc, char **argv) {
    const char *dir = NULL, *prefix = NULL, *type = "f16";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            prefix = argv[++i];
        } else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            type = argv[++i];
        } else if (argv[i][0] != '-' && !dir) {
            dir = argv[i];
        } else {
            fprintf(stderr, "ocellus convert: unexpected argument '%s' (ocellus convert --help lists the options)\n",
                    argv[i]);
            return 2;
        }
    }
    oc_convert_ftype ftype;
    if (!oc_convert_ftype_parse(type, &ftype)) {
        fprintf(stderr, "ocellus convert: unknown --type '%s' (f32, f16, bf16, q8_0, q4_0)\n", type);
        return 2;
    }
    if (!dir || !prefix) {
        usage(stderr);
        return 2;
    }
    char text_out[4200];
    snprintf(text_out, sizeof text_out, "%s.gguf", prefix);
    if (!oc_tool_output_ok("convert", "-o", text_out)) return 1;   /* before reading the checkpoint */
    oc_error e;
    oc_convert_result r;
    uint64_t t0 = oc_port_now_ns();
    if (oc_convert_hf(dir, prefix, ftype, NULL, &r, &e) != OC_OK) {
        fprintf(stderr, "ocellus convert: %s\n", e.message);
        return 1;
    }
    double s = (double)(oc_port_now_ns() - t0) / 1e9;
    printf("%s.gguf: %lld tensors, %.1f MB of tensor data\n", prefix, (long long)r.n_tensors_text,
           (double)r.n_bytes_text / 1e6);
    printf("%s-mmproj.gguf: %lld tensors, %.1f MB of tensor data\n", prefix, (long long)r.n_tensors_mmproj,
           (double)r.n_bytes_mmproj / 1e6);
    printf("converted in %.2f s, peak RSS %.1f MB\n", s, (double)oc_port_peak_rss_bytes() / 1e6);
    return 0;
}
