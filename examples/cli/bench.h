/* bench.h: the `ocellus bench SUBCOMMAND` benchmarks; each lives in its own bench_NAME.c and is
 * listed in cmd_bench.c. Each returns the process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef OC_BENCH_H
#define OC_BENCH_H

#include <stddef.h>

int bench_matmul(int argc, char **argv);   /* argv[0] is "matmul" */
int bench_attention(int argc, char **argv);   /* argv[0] is "attention" */

/* "model name" of the first CPU in /proc/cpuinfo, or the cpuid vendor string: into buf. */
void bench_cpu_name(char *buf, size_t n_bytes);

#endif
