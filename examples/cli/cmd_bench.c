/* cmd_bench.c: `ocellus bench WHAT ...`: dispatches to the benchmark of one component (bench_*.c).
 * Minimal version from the attention branch; the bench command's own branch may extend the table. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const cli_command benches[] = {
    { "attention", "attention engine: dense and sparse prefill, vision, decode vs FMA peak", bench_attention },
};

int cmd_bench(int argc, char **argv) {
    if (argc >= 2)
        for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
            if (!strcmp(argv[1], benches[i].name)) return benches[i].run(argc - 1, argv + 1);
    fprintf(argc >= 2 ? stderr : stdout, "usage: ocellus bench WHAT [ARGS...]\n\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        fprintf(argc >= 2 ? stderr : stdout, "  %-10s %s\n", benches[i].name, benches[i].help);
    return 2;
}
