/* bench.h: the `ocellus bench SUBCOMMAND` benchmarks; each lives in its own bench_NAME.c and is
 * listed in cmd_bench.c. Each returns the process exit status (0 ok, 1 failure, 2 usage error). */
#ifndef OC_BENCH_H
#define OC_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "attention/layout.h"
#include "core/isa.h"
#include "core/pool.h"
#include "attention/pattern.h"

int bench_matmul(int argc, char **argv);   /* argv[0] is "matmul" */
int bench_attention(int argc, char **argv);   /* argv[0] is "attention" */
int bench_vlm(int argc, char **argv);   /* argv[0] is "vlm" */
/* bench_kv.c: bench vlm --kv-context: KV bytes and decode speed per KV cache method. */
int bench_vlm_kv(const char *text_path, int n_threads, const char *ctx_list, int n_new, int n_rounds);
/* bench_llama.c: bench vlm --compare-llama DIR: llama.cpp's llama-mtmd-cli / llama-bench from DIR on the
 * same files, run right after each ocellus case (the two under the same load), then one table of both
 * columns and the ratios. One row per case: images 0 is the text-only pp case. */
typedef struct bench_vlm_row {
    char name[32];     /* "4 images 448x448", "text pp512" */
    char files[64];    /* the text GGUF's file name: tells the model pairs of one invocation apart */
    const char *text, *mmproj;   /* the files both programs ran */
    int n_images, image_px, image_tokens;
    double vision_ms, ttft_ms, prefill_tok_s, decode_tok_s;
    double load_start;   /* 1-minute load average when the ocellus case started (-1 unknown) */
} bench_vlm_row;
/* llama.cpp's numbers for one case; 0 where it printed no such timing (never a made-up number). */
typedef struct bench_llama_run {
    double vision_ms, ttft_ms, prefill_tok_s, decode_tok_s;   /* llama-mtmd-cli (image cases) */
    double pp_tok_s, tg_tok_s;                                /* llama-bench (text case) */
    int image_tokens;
    double cpu_share;   /* its CPU time / (wall x threads) over the whole run, loading included */
    double load_end;    /* 1-minute load average when it ended */
} bench_llama_run;
/* 0, or 2 (and a message) when a path cannot be passed through the shell. */
int bench_llama_check_paths(const char *dir, const char *text, const char *mmproj);
/* Runs llama.cpp on row's case: pixels[i] are the row's n_images RGB images of image_px squared. */
void bench_llama_case(const char *dir, int n_threads, int n_new, int pp, const bench_vlm_row *row,
                      const uint8_t *const *pixels, bench_llama_run *out);
void bench_llama_print(const char *dir, int n_threads, int pp, const bench_vlm_row *rows, const bench_llama_run *runs, int n);
int bench_attention_cl(int argc, char **argv);   /* the same with --backend opencl */
int bench_matmul_cl(int argc, char **argv);      /* bench matmul --backend opencl */

/* The attention benches' decoder prompt (bench_attention.c): 20 text tokens, n_images images of
 * image_tokens each between <vision_start>/<vision_end>, text up to 100; and the 12-head sparse
 * plan (7 heads sparse, every category). */
int bench_decoder_layout(int n_images, int image_tokens, oc_token_layout **out, int *n_tokens);
extern const oc_head_pattern bench_sparse_plan[12];
int bench_kernels(int argc, char **argv);   /* argv[0] is "kernels" */
int bench_plans(int argc, char **argv);     /* argv[0] is "plans" (bench_plans.c) */
/* Case (d) of bench attention: MMInference's dynamic patterns vs dense (bench_mminf.c). */
int bench_mminf(oc_pool *pool, int n_threads, oc_isa isa, int quick, int reps);

/* Writes DIR/qwen2vl-2b-TYPE.gguf and DIR/mmproj-qwen2vl-2b-TYPE.gguf (TYPE f16 or q8_0): random
 * weights with Qwen2-VL-2B shapes, tokenizer keys copied from tok_path (synth_qwen2vl.c). */
int synth_qwen2vl(const char *dir, const char *type, const char *tok_path, uint64_t seed);

/* "model name" of the first CPU in /proc/cpuinfo, or the cpuid vendor string: into buf. */
void bench_cpu_name(char *buf, size_t n_bytes);

#endif
