/* cmd_bench.c: `ocellus bench SUBCOMMAND [ARGS...]`: dispatches to the benchmarks in bench_*.c.
 * Speed is measured here, never in tests. */
#include "bench.h"
#include "tools/tools.h"
#include "port.h"

#include <stdio.h>
#include <string.h>

/* One row per benchmark; argv[0] of run is the benchmark's name. */
typedef struct bench_entry {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv);
} bench_entry;

static const bench_entry benches[] = {
    { "matmul", "FP32 FMA peak, copy bandwidth, GEMM/GEMV per weight type", bench_matmul },
    { "attention", "attention engine: dense and sparse prefill, vision, decode vs FMA peak", bench_attention },
    { "vlm", "end to end on Qwen2-VL-2B shapes: images, prefill, decode (--synth writes the model)", bench_vlm },
    { "kernels", "one untimed run of a kernel case, for instruction counts under emulation", bench_kernels },
    { "plans", "dense vs each plan on the same long-suite items: time per phase, ideal vs achieved", bench_plans },
};

void bench_cpu_name(char *buf, size_t n_bytes) {
    oc_cpu_features f;
    oc_port_cpu_features(&f);
    snprintf(buf, n_bytes, "%s", f.vendor);
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp) return;
    char line[512];
    while (fgets(line, sizeof line, fp)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *v = strchr(line, ':');
        if (v) {
            v += 1 + (v[1] == ' ');
            v[strcspn(v, "\n")] = 0;
            snprintf(buf, n_bytes, "%s", v);
        }
        break;
    }
    fclose(fp);
}

static void usage(FILE *f) {
    fprintf(f, "usage: ocellus bench SUBCOMMAND [ARGS...]\n\nsubcommands:\n");
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) fprintf(f, "  %-10s %s\n", benches[i].name, benches[i].help);
}

int oc_tool_bench(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) { usage(stdout); return 0; }
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        if (!strcmp(argv[1], benches[i].name)) return benches[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ocellus bench: unknown benchmark '%s' (ocellus bench --help lists them)\n", argv[1]);
    return 2;
}
