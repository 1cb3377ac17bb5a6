/* bench_matmul.c: `ocellus bench matmul`: this machine's FP32 FMA peak and copy bandwidth, then per
 * weight type the prefill GEMM (Qwen2-VL-2B ffn_up shape: 512 tokens x 1536 -> 8960) in GFLOP/s and
 * fraction of the peak, and the decode GEMV (1 token) against the bandwidth floor
 * (W bytes / copy bandwidth). Medians of repeated runs; GEMV weights rotate over >= 256 MiB of
 * copies so every call streams W from DRAM, as decode does with a whole model. Next to every GEMV
 * call the benchmark also times a copy that moves as many bytes (W bytes / 2 read + as many written,
 * from the copies of W not in use), and a read-only pass over W bytes of another copy: the "paired"
 * ratios are the medians of the per-call ratios, which hold when other work on the machine moves
 * the bandwidth between the start and the end of a run (the read-only one is the decode floor).
 * --cpu-time (one thread) times everything by the thread's CPU time instead of the wall clock: on a
 * shared machine it leaves out the time the thread waited for a core. */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime */
#include "tools/tools.h"
#include "bench.h"
#include "core/f16.h"
#include "kernels/matmul.h"
#include "kernels/matmul_kern.h"   /* the micro-kernels alone (microkernel_gflops) */
#include "kernels/quant.h"
#include "tools/roofline.h"
#include "core/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The shapes --shape names: the 2B text model's projections (512-token prefill chunk) and the vision
 * encoder's (one 448x448 image: 1024 patches). The first is the default. */
typedef struct shape { const char *name; int n_tok, n_in, n_out; } shape;
static const shape shapes[] = {
    { "up", 512, 1536, 8960 },           /* ffn_up / ffn_gate */
    { "down", 512, 8960, 1536 },         /* ffn_down: rows of 8960, x does not stay in L1 */
    { "q", 512, 1536, 1536 },            /* attn_q, attn_output */
    { "kv", 512, 1536, 256 },            /* attn_k, attn_v (2 KV heads of 128) */
    { "vision-qkv", 1024, 1280, 1280 },  /* the encoder's attn_q / k / v / output */
    { "vision-up", 1024, 1280, 5120 },
    { "vision-down", 1024, 5120, 1280 },
};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])
#define GEMV_ROTATE_BYTES ((size_t)256 << 20)

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}
static float rng_unit(uint64_t *s) { return (float)(rng_next(s) >> 40) / 16777216.0f * 2.0f - 1.0f; }

/* Random weights: values in [-1, 1] for float types; random bytes with small f16 scales otherwise. */
static void fill_weight(int32_t dtype, unsigned char *w, size_t row_bytes, int64_t n_in, int64_t n_out, uint64_t *s) {
    for (size_t i = 0; i < row_bytes * (size_t)n_out; i++) w[i] = (unsigned char)rng_next(s);
    for (int64_t o = 0; o < n_out; o++) {
        unsigned char *row = w + (size_t)o * row_bytes;
        uint16_t d = oc_f32_to_f16(0.01f);
        for (int64_t i = 0; i < n_in; i++) {
            float v = rng_unit(s);
            if (dtype == OC_DTYPE_F32) memcpy(row + 4 * i, &v, 4);
            if (dtype == OC_DTYPE_F16) ((uint16_t *)row)[i] = oc_f32_to_f16(v);
            if (dtype == OC_DTYPE_BF16) ((uint16_t *)row)[i] = oc_f32_to_bf16(v);
        }
        for (int64_t b = 0; b < n_in / 32; b++) {
            if (dtype == OC_DTYPE_Q8_0) ((oc_block_q8_0 *)row)[b].d = d;
            if (dtype == OC_DTYPE_Q4_0) ((oc_block_q4_0 *)row)[b].d = d;
        }
        for (int64_t b = 0; b < n_in / 256; b++) {
            if (dtype == OC_DTYPE_Q4_K) { ((oc_block_q4_k *)row)[b].d = d; ((oc_block_q4_k *)row)[b].dmin = d; }
            if (dtype == OC_DTYPE_Q6_K) ((oc_block_q6_k *)row)[b].d = d;
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v; the median, and the best (smallest) time in *best: on a machine shared with other work the
 * best repetition estimates the unloaded speed, the median the typical one. */
static double median(double *v, int n, double *best) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *best = v[0];
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct bench {
    oc_matmul_ctx *ctx;
    oc_pool *pool;
    float *x, *y;
    unsigned char *copy_dst;   /* GEMV_ROTATE_BYTES / 2: where the paired copies write */
    int reps, gemv_reps, cpu_time;
    double peak_gflops, copy_gbps;
    const oc_matmul_kernels *k;
    double bf16_peak_gflops, read_gbps;   /* 0: not measured */
    int n_tok, n_in, n_out;   /* the --shape */
} bench;

static uint64_t now_ns(const bench *b) {
    if (!b->cpu_time) return oc_port_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --cpu-time versions of the roofline measurements (roofline.c), on the calling thread */
static double peak_cpu_time(const bench *b, oc_isa isa) {
    double best = 0;
    for (int r = 0; r < 3; r++) {
        uint64_t t0 = now_ns(b);
        double flops = oc_roofline_fma_run(isa, 20000000);
        double s = (double)(now_ns(b) - t0) * 1e-9;
        if (s > 0 && flops / s > best) best = flops / s;
    }
    return best * 1e-9;
}

static double copy_cpu_time(const bench *b) {
    size_t n = (size_t)256 << 20;
    unsigned char *src = malloc(n), *dst = malloc(n);
    double best = 0;
    if (src && dst) {
        memset(src, 1, n);
        memset(dst, 2, n);
        for (int r = 0; r < 3; r++) {
            uint64_t t0 = now_ns(b);
            for (size_t o = 0; o < n; o += (size_t)1 << 20) memcpy(dst + o, src + o, (size_t)1 << 20);   /* as roofline.c */
            double s = (double)(now_ns(b) - t0) * 1e-9;
            if (s > 0 && 2.0 * (double)n / s > best) best = 2.0 * (double)n / s;
        }
    }
    free(src);
    free(dst);
    return best * 1e-9;
}

/* The read-only floor on the calling thread (oc_roofline_read_gbps's pass, pool NULL), timed by its
 * CPU time: a thread stalled on memory is still running, so this is its bandwidth when it has a core. */
static double read_cpu_time(const bench *b) {
    size_t n = (size_t)512 << 20;
    unsigned char *src = malloc(n);
    double best = 0;
    if (src) {
        memset(src, 1, n);
        for (int r = 0; r < 3; r++) {
            uint64_t t0 = now_ns(b);
            oc_roofline_read_seconds(NULL, src, n);
            double s = (double)(now_ns(b) - t0) * 1e-9;
            if (s > 0 && (double)n / s > best) best = (double)n / s;
        }
    }
    free(src);
    return best * 1e-9;
}

/* GFLOP/s of the FMA peak loop run on the calling thread for about `seconds` (--cpu-time): timed next
 * to a kernel, the ratio of the two is robust to other work that slows both (a core shared with
 * another thread, a lower clock), which thread CPU time alone does not remove. */
static double fma_burst_gflops(const bench *b, double seconds) {
    int64_t n_iter = (int64_t)(seconds * b->peak_gflops * 1e9 / (2.0 * OC_ROOFLINE_CHAINS * 8)) + 1000;
    uint64_t t0 = now_ns(b);
    double flops = oc_roofline_fma_run(oc_matmul_kernels_isa(b->k), n_iter);
    double s = (double)(now_ns(b) - t0) * 1e-9;
    return s > 0 ? flops / s * 1e-9 : 0;
}

/* The micro-kernels alone: the float path's mr x nr tile (and, with q8 set, the int8 path's Q8_0
 * tile) over one packed panel of 256 inputs against one X tile, both resident in L1, accumulating
 * into one Y tile: no dequantization, packing or driver. The GEMM rows' ceiling on this core; best
 * of 5 runs of n_calls tiles. GFLOP/s (int8: multiply-adds counted as for floats), 0 on no memory;
 * *paired: the median over the runs of the kernel's GFLOP/s / that of the FMA peak loop run next to it. */
static double microkernel_gflops(const bench *b, int q8, int64_t n_calls, double *paired) {
    const oc_matmul_kernels *k = b->k;
    const int64_t kc = 256, n_blocks = kc / OC_QK;
    int mr = q8 ? k->q8_mr : k->mr, nr = q8 ? k->q8_nr : k->nr;
    size_t panel_bytes = q8 ? (size_t)(nr / k->q8_group) * (size_t)n_blocks * OC_MM_Q8_RECORD_BYTES(k->q8_group)
                            : (size_t)nr * (size_t)kc * sizeof(float);
    size_t row_bytes = sizeof(oc_block_q8_0) * (size_t)n_blocks;
    float *x = malloc(sizeof(float) * (size_t)(mr * kc)), *rows = malloc(sizeof(float) * (size_t)(nr * kc));
    float *y = calloc((size_t)(mr * nr), sizeof(float));
    void *panel = aligned_alloc(64, (panel_bytes + 63) / 64 * 64);
    unsigned char *wq = malloc(row_bytes * (size_t)nr);
    oc_q8x *xq = aligned_alloc(64, (sizeof(oc_q8x) * (size_t)(mr * n_blocks) + 63) / 64 * 64);
    double best = 0;
    uint64_t seed = 7;
    if (x && rows && y && panel && wq && xq) {
        for (int64_t i = 0; i < mr * kc; i++) x[i] = rng_unit(&seed);
        for (int64_t i = 0; i < nr * kc; i++) rows[i] = rng_unit(&seed);
        if (q8) {
            for (int j = 0; j < nr; j++) oc_quantize_q8_0(rows + (size_t)j * kc, wq + (size_t)j * row_bytes, kc);
            k->pack_q8[OC_MM_I8_Q8_0](wq, row_bytes, nr, n_blocks, panel);
            for (int i = 0; i < mr; i++) k->quantize_q8x(x + (size_t)i * kc, kc, 1, xq + (size_t)i * n_blocks);
        } else {
            k->pack_f32(rows, (size_t)kc, nr, kc, panel);
        }
        double ratio[5], unused;
        for (int r = 0; r < 5; r++) {
            double peak = r % 2 ? fma_burst_gflops(b, 0.1) : 0;
            uint64_t t0 = now_ns(b);
            for (int64_t c = 0; c < n_calls; c++) {
                if (q8) k->gemm_q8[OC_MM_I8_Q8_0](mr, n_blocks, xq, (size_t)n_blocks, panel, y, (size_t)nr, 1);
                else k->gemm_f32(mr, kc, x, (size_t)kc, panel, y, (size_t)nr, 1);
            }
            double s = (double)(now_ns(b) - t0) * 1e-9, flops = 2.0 * mr * nr * (double)kc * (double)n_calls;
            if (!(r % 2)) peak = fma_burst_gflops(b, 0.1);
            if (s > 0 && flops / s > best) best = flops / s;
            ratio[r] = s > 0 && peak > 0 ? flops / s * 1e-9 / peak : 0;
        }
        *paired = median(ratio, 5, &unused);
        volatile float keep = y[0];   /* the tiles are used */
        (void)keep;
    }
    free(x);
    free(rows);
    free(y);
    free(panel);
    free(wq);
    free(xq);
    return best * 1e-9;
}

static int run_type(bench *b, int32_t dtype) {
    size_t row_bytes = (size_t)oc_dtype_row_bytes(dtype, b->n_in), w_bytes = row_bytes * b->n_out;
    size_t n_copies = (GEMV_ROTATE_BYTES + w_bytes - 1) / w_bytes;
    unsigned char *w = malloc(w_bytes * n_copies);
    double t[257], ratio[256], rd_ratio[256];
    oc_error err;
    if (!w) { fprintf(stderr, "bench matmul: out of memory\n"); return 1; }
    uint64_t seed = 0x1234567ULL + (uint64_t)dtype;
    fill_weight(dtype, w, row_bytes, b->n_in, b->n_out, &seed);
    for (size_t c = 1; c < n_copies; c++) memcpy(w + c * w_bytes, w, w_bytes);
    int is_q = oc_dtype_get(dtype)->block_elems > 1;
    for (int p = 0; p < 3; p++) {
        if (p == 1 && !is_q) continue;
        oc_matmul_path path = p == 2 ? OC_MATMUL_BF16 : p ? OC_MATMUL_INT8 : OC_MATMUL_FLOAT;
        const char *path_name = p == 2 ? "bf16" : p ? "int8" : "float";
        oc_matmul_ctx_set_path(b->ctx, path);
        oc_weight wt = { dtype, b->n_in, b->n_out, w, row_bytes };
        if (p == 2 && !oc_matmul_uses_bf16(b->ctx, &wt, b->n_tok)) continue;
        /* a forced int8 path without an int8 kernel for the shape runs the float path: skip it; the
         * BF16 path has no GEMV (decode reads the F16 rows) */
        int run_gemm = p == 2 || oc_matmul_uses_int8(b->ctx, &wt, b->n_tok) == p;
        int run_gemv = p != 2 && oc_matmul_uses_int8(b->ctx, &wt, 1) == p;
        double gemm_s = 0, gemv_s = 0, gemm_best = 0, gemv_best = 0, gemm_paired = 0, unused;
        double gemm_flops = 2.0 * b->n_tok * b->n_in * b->n_out;
        /* GEMM: one warm-up, then the median of reps; with --cpu-time each rep is paired with a run of
         * the FMA peak loop as long, before or after it in turn */
        for (int r = 0; run_gemm && r <= b->reps; r++) {
            double peak = b->cpu_time && r > 0 && r % 2 ? fma_burst_gflops(b, t[0]) : 0;
            uint64_t t0 = now_ns(b);
            if (oc_matmul(b->ctx, &wt, b->x, b->n_in, b->y, b->n_out, b->n_tok, NULL, &err) != OC_OK) {
                fprintf(stderr, "bench matmul: %s\n", err.message);
                free(w);
                return 1;
            }
            double s = (double)(now_ns(b) - t0) * 1e-9;
            if (r == 0) t[0] = s;   /* the warm-up's time sizes the FMA runs */
            if (b->cpu_time && r > 0 && !(r % 2)) peak = fma_burst_gflops(b, t[0]);
            if (r > 0) {
                t[r] = s;
                ratio[r - 1] = s > 0 && peak > 0 ? gemm_flops / s * 1e-9 / peak : 0;
            }
        }
        if (run_gemm) {
            gemm_s = median(t + 1, b->reps, &gemm_best);
            gemm_paired = median(ratio, b->reps, &unused);
        }
        /* GEMV: every call on the next copy of W; paired with a copy of W bytes / 2 from the copy of W
         * half the rotation away (cold too) to the next slice of copy_dst, in alternating order */
        size_t copy_bytes = w_bytes / 2, n_dst = GEMV_ROTATE_BYTES / 2 / copy_bytes;
        for (int r = 0; run_gemv && r < b->gemv_reps + (int)n_copies; r++) {
            wt.data = w + (size_t)r % n_copies * w_bytes;
            const unsigned char *copy_src = w + ((size_t)r + n_copies / 2) % n_copies * w_bytes;
            unsigned char *copy_dst = b->copy_dst + (size_t)r % n_dst * copy_bytes;
            /* and with a read-only pass over all W bytes of another cold copy: the read floor, paired */
            const unsigned char *read_src = w + ((size_t)r + n_copies / 2 + 1) % n_copies * w_bytes;
            uint64_t c0 = 0, c1 = 0, r0 = 0, r1 = 0, t0, t1;
            if (r % 2) {
                c0 = now_ns(b); oc_roofline_copy_seconds(b->pool, copy_dst, copy_src, copy_bytes); c1 = now_ns(b);
                r0 = now_ns(b); oc_roofline_read_seconds(b->pool, read_src, w_bytes); r1 = now_ns(b);
            }
            t0 = now_ns(b);
            oc_matmul(b->ctx, &wt, b->x, b->n_in, b->y, b->n_out, 1, NULL, &err);
            t1 = now_ns(b);
            if (!(r % 2)) {
                r0 = now_ns(b); oc_roofline_read_seconds(b->pool, read_src, w_bytes); r1 = now_ns(b);
                c0 = now_ns(b); oc_roofline_copy_seconds(b->pool, copy_dst, copy_src, copy_bytes); c1 = now_ns(b);
            }
            if (r >= (int)n_copies) {
                t[r - (int)n_copies] = (double)(t1 - t0) * 1e-9;
                ratio[r - (int)n_copies] = (double)(t1 - t0) / (double)(c1 > c0 ? c1 - c0 : 1);
                rd_ratio[r - (int)n_copies] = (double)(t1 - t0) / (double)(r1 > r0 ? r1 - r0 : 1);
            }
        }
        double paired = 0, paired_best = 0, rd_paired = 0;
        if (run_gemv) {
            gemv_s = median(t, b->gemv_reps, &gemv_best);
            paired = median(ratio, b->gemv_reps, &paired_best);
            rd_paired = median(rd_ratio, b->gemv_reps, &paired_best);
        }
        double floor_s = (double)w_bytes / (b->copy_gbps * 1e9), gflops = gemm_flops / gemm_s * 1e-9;
        oc_matmul_ctx_set_path(b->ctx, OC_MATMUL_AUTO);
        wt.data = w;
        const char *auto_gemm = oc_matmul_uses_int8(b->ctx, &wt, b->n_tok) ? "int8" : oc_matmul_uses_bf16(b->ctx, &wt, b->n_tok) ? "bf16" : "float";
        const char *auto_gemv = oc_matmul_uses_int8(b->ctx, &wt, 1) ? "int8" : "float";
        printf("%-5s %-5s | ", oc_dtype_name(dtype), path_name);
        /* the BF16 path against the BF16 peak; everything else against the FP32 FMA peak */
        double peak = p == 2 && b->bf16_peak_gflops > 0 ? b->bf16_peak_gflops : b->peak_gflops;
        if (run_gemm && b->cpu_time && p != 2)
            printf("%7.1f %7.1f %5.0f%% %5.0f%% %5.0f%% %s | ", gemm_s * 1e3, gflops, 100.0 * gflops / peak,
                   100.0 * gflops * gemm_s / gemm_best / peak, 100.0 * gemm_paired, strcmp(auto_gemm, path_name) ? "    " : "auto");
        else if (run_gemm)
            printf("%7.1f %7.1f %5.0f%% %5.0f%% %6s %s | ", gemm_s * 1e3, gflops, 100.0 * gflops / peak,
                   100.0 * gflops * gemm_s / gemm_best / peak, "-", strcmp(auto_gemm, path_name) ? "    " : "auto");
        else
            printf("%7s %7s %6s %6s %6s %4s | ", "-", "-", "-", "-", "-", "");
        double read_floor_s = b->read_gbps > 0 ? (double)w_bytes / (b->read_gbps * 1e9) : 0;
        if (run_gemv)
            printf("%7.0f %6.2f %7.0f %5.2f %5.2f %6.2f | %5.1f %5.2f %6.2f %s\n", gemv_s * 1e6, (double)w_bytes / 1e6, floor_s * 1e6,
                   gemv_s / floor_s, gemv_best / floor_s, paired, (double)w_bytes / gemv_s * 1e-9,
                   read_floor_s > 0 ? gemv_s / read_floor_s : 0.0, rd_paired, strcmp(auto_gemv, path_name) ? "" : "auto");
        else
            printf("%7s\n", "-");
        fflush(stdout);
    }
    free(w);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ocellus bench matmul [-t THREADS] [--isa scalar|avx2|avx512|neon] [--reps N] [--gemv-reps N]\n"
               "                            [--types f16,q8_0,...] [--cpu-time] [--shape NAME] [--down]\n"
               "Prints the FP32 FMA peak, the bandwidth floors, the micro-kernels' own ceiling, and per weight\n"
               "type the GEMM (n_tok x n_in x n_out) and the GEMV (1 x n_in x n_out) of one shape.\n"
               "--cpu-time: one thread, timed by its CPU time (for machines shared with other work).\n"
               "--shape NAME: the model's matrix to time (default up):\n");
    for (int i = 0; i < N_SHAPES; i++)
        fprintf(f, "  %-12s %4d x %4d x %4d\n", shapes[i].name, shapes[i].n_tok, shapes[i].n_in, shapes[i].n_out);
    fprintf(f, "--down: the same as --shape down (ffn_down, whose x does not stay in L1).\n");
}

int bench_matmul(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--backend") && strcmp(argv[i + 1], "cpu")) return bench_matmul_cl(argc, argv);
    int n_threads = 0, reps = 5, gemv_reps = 51, cpu_time = 0;
    const shape *sh = &shapes[0];
    const char *isa_name = NULL, *types = "f16,q8_0,q4_0,f32,bf16,q4_k,q6_k";
    for (int i = 1; i < argc; i += 2) {   /* every option but the flags takes one value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--cpu-time")) { cpu_time = 1; n_threads = 1; i--; continue; }
        if (!strcmp(a, "--down")) { sh = &shapes[1]; i--; continue; }
        if (!v) { fprintf(stderr, "ocellus bench matmul: %s needs a value (or is not an option: --help lists them)\n", a); return 2; }
        if (!strcmp(a, "-t")) { if (!oc_tool_int_arg("bench matmul", a, v, 1, 1024, &n_threads)) return 2; }
        else if (!strcmp(a, "--isa")) isa_name = v;
        else if (!strcmp(a, "--reps")) { if (!oc_tool_int_arg("bench matmul", a, v, 1, 200, &reps)) return 2; }
        else if (!strcmp(a, "--gemv-reps")) { if (!oc_tool_int_arg("bench matmul", a, v, 1, 200, &gemv_reps)) return 2; }
        else if (!strcmp(a, "--types")) types = v;
        else if (!strcmp(a, "--shape")) {
            sh = NULL;
            for (int j = 0; j < N_SHAPES; j++)
                if (!strcmp(v, shapes[j].name)) sh = &shapes[j];
            if (!sh) { fprintf(stderr, "ocellus bench matmul: unknown --shape '%s' (--help lists them)\n", v); return 2; }
        }
        else if (!strcmp(a, "--backend")) continue;   /* cpu */
        else { fprintf(stderr, "ocellus bench matmul: unknown option '%s' (ocellus bench matmul --help lists them)\n", a); return 2; }
    }
    if (reps < 1 || reps > 200 || gemv_reps < 1 || gemv_reps > 200) { fprintf(stderr, "bench matmul: reps must be 1..200\n"); return 2; }
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_isa isa = oc_isa_best(&cpu);
    if (isa_name) {
        int found = 0;
        for (int i = 0; i < OC_ISA_COUNT; i++)
            if (!strcmp(isa_name, oc_isa_name((oc_isa)i))) { isa = (oc_isa)i; found = 1; }
        if (!found) { fprintf(stderr, "bench matmul: unknown isa '%s'\n", isa_name); return 2; }
    }
    const oc_matmul_kernels *k = oc_matmul_kernels_for(isa);
    if (!k) { fprintf(stderr, "bench matmul: isa %s is not built or does not run here\n", oc_isa_name(isa)); return 1; }
    oc_pool *pool = NULL;
    oc_error err;
    if (oc_pool_open(&pool, n_threads, NULL, &err) != OC_OK) { fprintf(stderr, "bench matmul: %s\n", err.message); return 1; }
    char cpu_name[256];
    bench_cpu_name(cpu_name, sizeof cpu_name);
    bench b = { NULL, pool, NULL, NULL, NULL, reps, gemv_reps, cpu_time, 0, 0, k, 0, 0, sh->n_tok, sh->n_in, sh->n_out };
    int rc = 1;
    printf("cpu: %s; kernels %s; %d threads; timed by %s\n", cpu_name, oc_matmul_kernels_name(k), oc_pool_n_threads(pool),
           cpu_time ? "thread CPU time" : "wall clock");
    b.peak_gflops = cpu_time ? peak_cpu_time(&b, isa) : oc_roofline_fma_gflops(pool, isa);
    printf("FP32 FMA peak (%s, %d threads, %d chains each): %.1f GFLOP/s\n", oc_isa_name(isa), oc_pool_n_threads(pool),
           OC_ROOFLINE_CHAINS, b.peak_gflops);
    double bf16_peak = cpu_time ? 0 : oc_roofline_bf16_gflops(pool);
    if (bf16_peak > 0)
        printf("BF16 dot-product peak (vdpbf16ps, %d threads): %.1f GFLOP/s = %.2f x the FMA peak\n", oc_pool_n_threads(pool),
               bf16_peak, bf16_peak / b.peak_gflops);
    b.bf16_peak_gflops = bf16_peak;
    /* ~0.2 s per run at the FMA peak */
    double mk_paired = 0, mk = microkernel_gflops(&b, 0, (int64_t)(b.peak_gflops * 1e8 / (k->mr * k->nr * 256.0)) + 1, &mk_paired);
    printf("float micro-kernel alone (%dx%d tile, 256 inputs, in L1): %.1f GFLOP/s = %.0f%% of the FMA peak", k->mr, k->nr,
           mk, 100.0 * mk / b.peak_gflops);
    if (cpu_time) printf(", paired %.0f%%", 100.0 * mk_paired);
    printf("\n");
    if (k->gemm_q8[OC_MM_I8_Q8_0]) {
        mk = microkernel_gflops(&b, 1, (int64_t)(b.peak_gflops * 1e8 / (k->q8_mr * k->q8_nr * 256.0)) + 1, &mk_paired);
        printf("int8 Q8_0 micro-kernel alone (%dx%d tile, 256 inputs, in L1): %.1f GFLOP/s-equiv = %.0f%% of the FMA peak",
               k->q8_mr, k->q8_nr, mk, 100.0 * mk / b.peak_gflops);
        if (cpu_time) printf(", paired %.0f%%", 100.0 * mk_paired);
        printf("\n");
    }
    b.copy_gbps = cpu_time ? copy_cpu_time(&b) : oc_roofline_copy_gbps(pool, NULL);
    printf("copy bandwidth (memcpy of 256 MiB, read + write bytes): %.1f GB/s\n", b.copy_gbps);
    b.read_gbps = cpu_time ? read_cpu_time(&b) : oc_roofline_read_gbps(pool, NULL);
    if (b.read_gbps > 0) printf("read-only bandwidth (a reduction over 512 MiB, nothing written): %.1f GB/s\n", b.read_gbps);
    b.x = malloc(sizeof(float) * b.n_tok * b.n_in);
    b.y = malloc(sizeof(float) * b.n_tok * b.n_out);
    b.copy_dst = malloc(GEMV_ROTATE_BYTES / 2);
    if (b.copy_dst) memset(b.copy_dst, 0, GEMV_ROTATE_BYTES / 2);   /* fault the pages in */
    if (!b.x || !b.y || !b.copy_dst || b.peak_gflops <= 0 || b.copy_gbps <= 0 ||
        oc_matmul_ctx_open(&b.ctx, k, pool, b.n_in, b.n_tok, NULL, &err) != OC_OK) {
        fprintf(stderr, "bench matmul: setup failed\n");
        goto done;
    }
    uint64_t seed = 42;
    for (size_t i = 0; i < (size_t)b.n_tok * b.n_in; i++) b.x[i] = rng_unit(&seed);
    printf("\nGEMM %dx%dx%d (n_tok x n_in x n_out), median of %d | GEMV 1x%dx%d, median of %d, W from DRAM\n",
           b.n_tok, b.n_in, b.n_out, reps, b.n_in, b.n_out, gemv_reps);
    printf("%-5s %-5s | %7s %7s %6s %6s %6s %4s | %7s %6s %7s %5s %5s %6s | %5s %5s %6s\n", "", "", "median", "median", "of", "best",
           "paired", "", "median", "", "floor", "ratio", "ratio", "ratio", "W", "read", "read");
    printf("%-5s %-5s | %7s %7s %6s %6s %6s %4s | %7s %6s %7s %5s %5s %6s | %5s %5s %6s\n", "type", "path", "ms", "GFLOP/s", "peak", "of pk",
           "of pk", "", "us", "W MB", "us", "med", "best", "paired", "GB/s", "ratio", "paired");
    rc = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *tok = strtok(list, ","); tok && rc == 0; tok = strtok(NULL, ",")) {
        int32_t dtype = -1;
        static const int32_t known[] = { OC_DTYPE_F32, OC_DTYPE_F16, OC_DTYPE_BF16, OC_DTYPE_Q8_0, OC_DTYPE_Q4_0,
                                         OC_DTYPE_Q4_K, OC_DTYPE_Q6_K };
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (!strcmp(tok, oc_dtype_name(known[i]))) dtype = known[i];
        if (dtype < 0) { fprintf(stderr, "bench matmul: unknown type '%s'\n", tok); rc = 2; break; }
        rc = run_type(&b, dtype);
    }
    if (rc == 0)
        printf("('auto': the path OC_MATMUL_AUTO takes for that shape; 'best of pk': the fastest repetition; ratio: time /\n"
               " floor, floor = W bytes / copy bandwidth; paired: median over calls of GEMV time / time of a copy moving\n"
               " as many bytes, taken next to it; W GB/s: W bytes / median GEMV time; read ratio: median GEMV time /\n"
               " (W bytes / read-only bandwidth); read paired: median over calls of GEMV time / time of a read-only pass\n"
               " over the W bytes of another cold copy, taken next to it; the bf16 path's 'of peak' is of the BF16 peak; GEMM 'paired of pk'\n"
               " (--cpu-time): median over reps of GFLOP/s / that of the FMA peak loop run as long next to it)\n");
done:
    oc_matmul_ctx_close(b.ctx);
    oc_pool_close(pool);
    free(b.x);
    free(b.y);
    free(b.copy_dst);
    return rc;
}
