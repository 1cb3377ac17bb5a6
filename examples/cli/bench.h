/* bench.h: the `ocellus bench SUBCOMMAND` benchmarks; each lives in its own bench_NAME.c and is
 * listed in cmd_bench.c. Each returns the process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef OC_BENCH_H
#define OC_BENCH_H

#include <stddef.h>
#include <stdint.h>

int bench_matmul(int argc, char **argv);   /* argv[0] is "matmul" */
int bench_attention(int argc, char **argv);   /* argv[0] is "attention" */
int bench_vlm(int argc, char **argv);   /* argv[0] is "vlm" */
int bench_kernels(int argc, char **argv);   /* argv[0] is "kernels" */

/* Writes DIR/qwen2vl-2b-TYPE.gguf and DIR/mmproj-qwen2vl-2b-TYPE.gguf (TYPE f16 or q8_0): random
 * weights with Qwen2-VL-2B shapes, tokenizer keys copied from tok_path (synth_qwen2vl.c). */
int synth_qwen2vl(const char *dir, const char *type, const char *tok_path, uint64_t seed);

/* "model name" of the first CPU in /proc/cpuinfo, or the cpuid vendor string: into buf. */
void bench_cpu_name(char *buf, size_t n_bytes);

#endif
