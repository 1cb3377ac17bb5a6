/* bench_kernels.c: `ocellus bench kernels [--isa NAME] [--path auto|float|int8|bf16] [--setup-only] CASE`:
 * one fixed piece of kernel work, run once on one thread with no timing loop, for counting
 * instructions under emulation (tests/qemu/icount.sh; BENCHMARKS.md "NEON under qemu"): the
 * count of a run minus that of the same command with --setup-only is the kernel's alone.
 * Cases: gemm_f32, gemm_f16, gemm_q8_0, gemm_q4_0 (256 x 512 x 512, n_tok x n_in x n_out: one prefill chunk);
 * gemv_f16, gemv_q8_0 (1 x 2048 x 2048); attn (causal prefill, 128 tokens, 12 q / 2 kv heads,
 * head_dim 64, f16 K/V); tile (the micro-kernel of --path alone, run_tile). Prints the kernels,
 * the path, the case's FLOPs (a multiply-add counts 2;
 * attention: 4 head_dim per (query, key) pair the causal mask keeps) and a checksum of the output. */
#include "attention/attn.h"
#include "bench.h"
#include "core/dtype.h"
#include "core/f16.h"
#include "core/isa.h"
#include "kernels/matmul_kern.h"
#include "port.h"
#include "kernels/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float rng_value(uint64_t *s) {   /* deterministic, in [-1, 1) */
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static double checksum(const float *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)y[i] * (double)((i % 7) + 1);
    return s;
}

/* Y = X W^T with W of dtype (quantized from random values), n_tok x n_in x n_out */
static int run_matmul(oc_isa isa, oc_matmul_path path, int setup_only, int32_t dtype, int n_tok, int n_in, int n_out) {
    const oc_matmul_kernels *k = oc_matmul_kernels_for(isa);
    if (!k) { fprintf(stderr, "bench kernels: isa %s is not built or does not run here\n", oc_isa_name(isa)); return 1; }
    size_t row_bytes = (size_t)oc_dtype_row_bytes(dtype, (uint64_t)n_in);
    float *x = malloc(sizeof(float) * (size_t)n_tok * n_in), *y = malloc(sizeof(float) * (size_t)n_tok * n_out);
    float *row = malloc(sizeof(float) * (size_t)n_in);
    unsigned char *w = malloc(row_bytes * (size_t)n_out);
    oc_matmul_ctx *ctx = NULL;
    oc_error err;
    int rc = 1;
    if (!x || !y || !row || !w || oc_matmul_ctx_open(&ctx, k, NULL, n_in, n_tok, NULL, &err) != OC_OK) goto done;
    uint64_t s = 42;
    for (size_t i = 0; i < (size_t)n_tok * n_in; i++) x[i] = rng_value(&s);
    for (int o = 0; o < n_out; o++) {
        unsigned char *dst = w + (size_t)o * row_bytes;
        for (int i = 0; i < n_in; i++) row[i] = rng_value(&s);
        if (dtype == OC_DTYPE_Q8_0) oc_quantize_q8_0(row, dst, n_in);
        else if (dtype == OC_DTYPE_Q4_0) oc_quantize_q4_0(row, dst, n_in);
        else if (dtype == OC_DTYPE_F32) memcpy(dst, row, sizeof(float) * (size_t)n_in);
        else for (int i = 0; i < n_in; i++) ((uint16_t *)dst)[i] = oc_f32_to_f16(row[i]);
    }
    oc_matmul_ctx_set_path(ctx, path);
    oc_weight wt = { dtype, n_in, n_out, w, row_bytes };
    printf("matmul %s %dx%dx%d: kernels %s, path %s, %.0f flops", oc_dtype_name(dtype), n_tok, n_in, n_out,
           oc_matmul_kernels_name(k), oc_matmul_uses_int8(ctx, &wt, n_tok) ? "int8" : oc_matmul_uses_bf16(ctx, &wt, n_tok) ? "bf16" : "float",
           2.0 * n_tok * n_in * n_out);
    if (!setup_only && oc_matmul(ctx, &wt, x, (size_t)n_in, y, (size_t)n_out, n_tok, NULL, &err) != OC_OK) goto done;
    printf(setup_only ? ", setup only\n" : ", checksum %.6e\n", setup_only ? 0.0 : checksum(y, (size_t)n_tok * n_out));
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench kernels: matmul failed\n");
    oc_matmul_ctx_close(ctx);
    free(x); free(y); free(row); free(w);
    return rc;
}

/* The micro-kernel alone (case "tile"): the table's mr x nr tile of the path (float: f32 panel;
 * int8: Q8_0; bf16, or float where the table has no BF16 kernels, as the driver falls back) over
 * one packed panel of 256 inputs and one X tile, both L1-resident, called as often as a
 * TILE_TOK x TILE_OUT block of outputs needs, TILE_REPS times, accumulating into one Y tile (the
 * same FLOPs for every table: TILE_TOK and TILE_OUT are multiples of every mr and nr). Packing and
 * X conversion are setup: what the kernel issues per FLOP without the driver, the packing and
 * the conversions that the gemm cases include. */
#define TILE_TOK 48
#define TILE_OUT 96
#define TILE_REPS 4
static int run_tile(oc_isa isa, oc_matmul_path path, int setup_only) {
    const oc_matmul_kernels *k = oc_matmul_kernels_for(isa);
    if (!k) { fprintf(stderr, "bench kernels: isa %s is not built or does not run here\n", oc_isa_name(isa)); return 1; }
    enum { KC = 256, NB = KC / OC_QK };
    const int q8 = path == OC_MATMUL_INT8, bf = path == OC_MATMUL_BF16 && k->gemm_bf16;
    const int mr = q8 ? k->q8_mr : bf ? k->bf16_mr : k->mr, nr = q8 ? k->q8_nr : bf ? OC_MM_BF16_NR : k->nr;
    size_t panel_bytes = q8 ? (size_t)(nr / k->q8_group) * NB * OC_MM_Q8_RECORD_BYTES(k->q8_group)
                            : (size_t)nr * KC * (bf ? sizeof(uint16_t) : sizeof(float));
    size_t row_bytes = q8 ? sizeof(oc_block_q8_0) * NB : (size_t)KC * sizeof(float);
    float *x = malloc(sizeof(float) * (size_t)(mr * KC)), *rows = malloc(sizeof(float) * (size_t)(nr * KC));
    float *y = calloc((size_t)(mr * nr), sizeof(float));
    void *panel = aligned_alloc(64, (panel_bytes + 63) / 64 * 64);
    unsigned char *wq = malloc(row_bytes * (size_t)nr);
    oc_q8x *xq = aligned_alloc(64, (sizeof(oc_q8x) * (size_t)(mr * NB) + 63) / 64 * 64);
    uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)(mr * KC)), *wb = malloc(sizeof(uint16_t) * (size_t)(nr * KC));
    int rc = 1;
    if (TILE_TOK % mr || TILE_OUT % nr) { fprintf(stderr, "bench kernels: tile %dx%d does not divide the case\n", mr, nr); goto done; }
    if (!x || !rows || !y || !panel || !wq || !xq || !xb || !wb) { fprintf(stderr, "bench kernels: out of memory\n"); goto done; }
    uint64_t s = 42;
    for (int i = 0; i < mr * KC; i++) x[i] = rng_value(&s);
    for (int i = 0; i < nr * KC; i++) rows[i] = rng_value(&s);
    if (q8) {
        for (int j = 0; j < nr; j++) oc_quantize_q8_0(rows + (size_t)j * KC, wq + (size_t)j * row_bytes, KC);
        k->pack_q8[OC_MM_I8_Q8_0](wq, row_bytes, nr, NB, panel);
        for (int i = 0; i < mr; i++) k->quantize_q8x(x + (size_t)i * KC, KC, 1, xq + (size_t)i * NB);
    } else if (bf) {
        k->x_to_bf16(x, (int64_t)mr * KC, xb);
        k->x_to_bf16(rows, (int64_t)nr * KC, wb);
        k->pack_bf16((const uint32_t *)(const void *)wb, KC / 2, nr, KC / 2, panel);
    } else {
        k->pack_f32(rows, KC, nr, KC, panel);
    }
    const int n_calls = TILE_REPS * (TILE_TOK / mr) * (TILE_OUT / nr);
    printf("tile %s %dx%dx%d: kernels %s, %d calls, %.0f flops", q8 ? "int8" : bf ? "bf16" : "float", mr, KC, nr, k->name,
           n_calls, 2.0 * TILE_REPS * TILE_TOK * TILE_OUT * KC);
    for (int c = 0; !setup_only && c < n_calls; c++) {
        if (q8) k->gemm_q8[OC_MM_I8_Q8_0](mr, NB, xq, NB, panel, y, (size_t)nr, 1);
        else if (bf) k->gemm_bf16(mr, KC / 2, (const uint32_t *)(const void *)xb, KC / 2, panel, y, (size_t)nr, 1);
        else k->gemm_f32(mr, KC, x, KC, panel, y, (size_t)nr, 1);
    }
    printf(setup_only ? ", setup only\n" : ", checksum %.6e\n", setup_only ? 0.0 : checksum(y, (size_t)(mr * nr)));
    rc = 0;
done:
    free(x); free(rows); free(y); free(panel); free(wq); free(xq); free(xb); free(wb);
    return rc;
}

static int run_attn(oc_isa isa, int setup_only) {
    enum { N = 128, H = 12, HKV = 2, D = 64 };
    oc_attn_dims dims = { N, N, H, HKV, D };
    size_t scratch_bytes = oc_attn_scratch_bytes(&dims, 1);
    float *q = malloc(sizeof(float) * N * H * D), *out = malloc(sizeof(float) * N * H * D);
    uint16_t *kv = malloc(sizeof(uint16_t) * 2 * N * HKV * D);
    void *scratch = oc_port_aligned_alloc(OC_MEM_ALIGN, scratch_bytes);
    int rc = 1;
    if (q && out && kv && scratch) {
        uint64_t s = 7;
        for (size_t i = 0; i < (size_t)N * H * D; i++) q[i] = 2.0f * rng_value(&s);
        for (size_t i = 0; i < (size_t)2 * N * HKV * D; i++) kv[i] = oc_f32_to_f16(rng_value(&s));
        oc_attn_call a;
        memset(&a, 0, sizeof a);
        a.n_q = a.n_kv = N; a.n_head = H; a.n_head_kv = HKV; a.head_dim = D;
        a.q_stride_token = H * D; a.q_stride_head = D;
        a.kv_dtype = OC_DTYPE_F16;
        a.k_stride_token = a.v_stride_token = HKV * D; a.k_stride_head = a.v_stride_head = D;
        a.out_stride_token = H * D; a.out_stride_head = D;
        a.scale = 1.0f / sqrtf((float)D);
        a.mask = OC_ATTN_CAUSAL;
        oc_attn_host mem = { q, kv, kv + N * HKV * D, out };
        oc_error err;
        printf("attention causal %d tokens, %d/%d heads, d %d: kernels %s, %.0f flops", N, H, HKV, D, oc_attn_kernels_name(isa),
               4.0 * D * H * (N * (N + 1) / 2.0));
        if (setup_only) { printf(", setup only\n"); rc = 0; }
        else if (oc_attn_run(&a, &mem, isa, NULL, scratch, scratch_bytes, NULL, &err) == OC_OK) {
            printf(", checksum %.6e\n", checksum(out, (size_t)N * H * D));
            rc = 0;
        } else fprintf(stderr, "\nbench kernels: %s\n", err.message);
    }
    free(q); free(out); free(kv);
    oc_port_aligned_free(scratch);
    return rc;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ocellus bench kernels [--isa scalar|avx2|avx512|neon] [--path auto|float|int8|bf16] [--setup-only] CASE\n"
               "One fixed run of CASE on one thread, untimed (for instruction counts under emulation):\n"
               "  gemm_f32, gemm_f16, gemm_q8_0, gemm_q4_0 (256x512x512), gemv_f16, gemv_q8_0 (1x2048x2048), attn (causal, 128 tokens),\n"
               "  tile (the --path's micro-kernel alone: float, int8 (Q8_0) or bf16; 48x256x96, 4 times, on one panel)\n");
}

int bench_kernels(int argc, char **argv) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_isa isa = oc_isa_best(&cpu);
    oc_matmul_path path = OC_MATMUL_AUTO;
    int setup_only = 0;
    const char *name = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--setup-only")) {
            setup_only = 1;
        } else if (!strcmp(a, "--isa")) {
            int found = 0;
            for (int j = 0; j < OC_ISA_COUNT; j++)
                if (!strcmp(v, oc_isa_name((oc_isa)j))) { isa = (oc_isa)j; found = 1; }
            if (!found) { fprintf(stderr, "bench kernels: unknown isa '%s'\n", v); return 2; }
            i++;
        } else if (!strcmp(a, "--path")) {
            if (!strcmp(v, "auto")) path = OC_MATMUL_AUTO;
            else if (!strcmp(v, "float")) path = OC_MATMUL_FLOAT;
            else if (!strcmp(v, "int8")) path = OC_MATMUL_INT8;
            else if (!strcmp(v, "bf16")) path = OC_MATMUL_BF16;
            else { fprintf(stderr, "ocellus bench kernels: --path wants auto, float, int8 or bf16, not '%s'\n", v); return 2; }
            i++;
        } else if (a[0] != '-' && !name) {
            name = a;
        } else {
            fprintf(stderr, "ocellus bench kernels: unexpected argument '%s' (ocellus bench kernels --help lists them)\n", a);
            return 2;
        }
    }
    if (!name) { usage(stderr); return 2; }
    if (!oc_isa_runs(isa, &cpu)) { fprintf(stderr, "bench kernels: isa %s does not run here\n", oc_isa_name(isa)); return 1; }
    if (!strcmp(name, "gemm_f32")) return run_matmul(isa, path, setup_only, OC_DTYPE_F32, 256, 512, 512);
    if (!strcmp(name, "gemm_f16")) return run_matmul(isa, path, setup_only, OC_DTYPE_F16, 256, 512, 512);
    if (!strcmp(name, "gemm_q8_0")) return run_matmul(isa, path, setup_only, OC_DTYPE_Q8_0, 256, 512, 512);
    if (!strcmp(name, "gemm_q4_0")) return run_matmul(isa, path, setup_only, OC_DTYPE_Q4_0, 256, 512, 512);
    if (!strcmp(name, "gemv_f16")) return run_matmul(isa, path, setup_only, OC_DTYPE_F16, 1, 2048, 2048);
    if (!strcmp(name, "gemv_q8_0")) return run_matmul(isa, path, setup_only, OC_DTYPE_Q8_0, 1, 2048, 2048);
    if (!strcmp(name, "attn")) return run_attn(isa, setup_only);
    if (!strcmp(name, "tile")) return run_tile(isa, path, setup_only);
    fprintf(stderr, "ocellus bench kernels: unknown case '%s' (ocellus bench kernels --help lists them)\n", name);
    return 2;
}
