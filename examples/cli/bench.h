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
/* What else used the CPU over a span of a run: a snapshot at each end (bench_span_now), then
 * bench_other_share. own_s is the CPU time of whatever the span measures (this process, or the
 * children it waited for), which is taken out of the machine's busy time. */
typedef struct bench_span {
    uint64_t ns;      /* monotonic wall clock */
    double busy_s;    /* oc_port_machine_busy_cpu_s, -1 unknown */
    double own_s;     /* the measured program's CPU seconds so far, -1 unknown */
} bench_span;
void bench_span_now(bench_span *s, double own_s);
/* Other processes' CPU time over [a, b] as a share of the machine's (wall x logical CPUs), 0..1;
 * -1 where the OS does not say, -2 for a span of under 2 CPU-seconds (wall x CPUs), which /proc/stat's
 * 10 ms ticks cannot resolve to 1%. */
double bench_other_share(const bench_span *a, const bench_span *b);
/* Above this share of other load a row is marked busy (the comparisons of record take clean rows:
 * other load under 2%). */
#define BENCH_BUSY_SHARE 0.02

/* The image cases' question. llama-mtmd-cli gets it without the newline, after one <__media__> line
 * per image (bench_llama.c run_mtmd), so that with one image both programs see the same tokens. */
#define BENCH_VLM_QUESTION "\nDescribe these images in detail."
/* The system message ocellus's chat template adds by default (src/model/prompt.c), passed to
 * llama-mtmd-cli as -sys so both prompts hold the same tokens. */
#define BENCH_VLM_SYSTEM "You are a helpful assistant."

/* Phases of one ocellus case, for the other-load shares of bench_vlm_row. */
enum { BENCH_PH_VISION, BENCH_PH_PREFILL, BENCH_PH_TTFT, BENCH_PH_DECODE, BENCH_PH_N };

typedef struct bench_vlm_row {
    char name[32];     /* "4 images 448x448", "text pp512" */
    char files[64];    /* the text GGUF's file name: tells the model pairs of one invocation apart */
    const char *text, *mmproj;   /* the files both programs ran */
    int n_images, image_px, image_tokens;
    int prompt_tokens;   /* the whole prompt, image tokens and chat template included */
    int n_decoded;       /* tokens decode produced after the first (generated - 1) */
    double vision_ms, ttft_ms, prefill_tok_s, decode_tok_s;
    double other[BENCH_PH_N];   /* other load during each phase of the ocellus case (bench_other_share) */
} bench_vlm_row;
/* llama.cpp's numbers for one case; 0 where it printed no such timing (never a made-up number). */
typedef struct bench_llama_run {
    double vision_ms, ttft_ms, prefill_tok_s, decode_tok_s;   /* llama-mtmd-cli (image cases) */
    int image_tokens, prompt_tokens, decode_runs;             /* as it counted them (0: not printed) */
    double pp_tok_s, tg_tok_s;                                /* llama-bench (text case) */
    int tg_n, tg_depth;   /* the tg test it ran: tg_n tokens after tg_depth of context (-1: this
                             llama-bench has no -d, so from an empty context) */
    double cpu_share, cpu_share_tg;   /* its CPU time / (wall x threads) over the whole run, loading included */
    double other, other_tg;           /* other load during its run (bench_other_share); _tg: llama-bench's tg run */
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
/* A plan or model path's file name without ".plan", safe inside JSON (bench_plans.c). */
void bench_plan_short_name(const char *path, char *out, size_t n);
/* bench_plans_ctx.c: bench plans --context LIST: dense and each plan on the language model alone at
 * these prompt lengths (synthetic prompt of 256-token images), prefill, decode and KV per plan. */
int bench_plans_context(const char *text_path, const char *const *plan_paths, int n_plans, const char *ctx_list,
                        int n_threads, int n_reps, int32_t chunk, int n_new, const char *json_path);
/* Case (d) of bench attention: MMInference's dynamic patterns vs dense (bench_mminf.c). */
int bench_mminf(oc_pool *pool, int n_threads, oc_isa isa, int quick, int reps);

/* Writes DIR/qwen2vl-2b-TYPE.gguf and DIR/mmproj-qwen2vl-2b-TYPE.gguf (TYPE f16, q8_0 or q4_0):
 * random weights with Qwen2-VL-2B shapes, tokenizer keys copied from tok_path (synth_qwen2vl.c).
 * n_layers 0: the 2B's 28 text / 32 vision layers; else that many of each, "-Nl" in the names. */
int synth_qwen2vl(const char *dir, const char *type, const char *tok_path, uint64_t seed, int n_layers);

/* "model name" of the first CPU in /proc/cpuinfo, or the cpuid vendor string: into buf. */
void bench_cpu_name(char *buf, size_t n_bytes);

#endif
