/* bench_matmul_cl.c: `ocellus bench matmul --backend opencl [--device N|NAME]`: the device's FP32
 * FMA peak (opencl/kernels/peak.cl), then per weight type the prefill GEMM (Qwen2-VL-2B ffn_up: 512 tokens
 * x 1536 -> 8960) in GFLOP/s and fraction of the peak, and the decode GEMV (1 token) in GB/s of
 * weight bytes read. F32 runs twice: through CLBlast (when built) and through opencl/kernels/matmul.cl.
 * Best of the runs, timed from enqueue to clFinish. */
#include "tools/tools.h"
#include "bench.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if OC_HAVE_OPENCL

#include "opencl/cl_ops.h"
#include "core/dtype.h"
#include "core/f16.h"
#include "port.h"
#include "kernels/quant.h"

#define N_TOK 512
#define N_IN 1536
#define N_OUT 8960

/* Best milliseconds of reps runs of y = x W^T for n_tok tokens (one untimed warm-up first). */
static double time_matmul(oc_cl_device *dev, const oc_cl_weight *w, oc_cl_buf *x, oc_cl_buf *y, int n_tok, int reps) {
    oc_error err;
    double best = 1e300;
    for (int rep = -1; rep < reps; rep++) {
        uint64_t t0 = oc_port_now_ns();
        if (oc_cl_matmul(dev, w, oc_cl_mat_of(x, 0, N_IN), oc_cl_mat_of(y, 0, N_OUT), n_tok, NULL, &err) != OC_OK ||
            oc_cl_finish(dev, &err) != OC_OK) {
            fprintf(stderr, "bench matmul: %s\n", err.message);
            return -1;
        }
        double ms = (double)(oc_port_now_ns() - t0) * 1e-6;
        if (rep >= 0 && ms < best) best = ms;
    }
    return best;
}

int bench_matmul_cl(int argc, char **argv) {
    const char *device = NULL;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) i++;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) { if (!oc_tool_int_arg("bench matmul", argv[i], argv[i + 1], 1, 200, &reps)) return 2; i++; }
        else {
            fprintf(stderr, "usage: ocellus bench matmul --backend opencl [--device N|NAME] [--reps N]\n");
            return !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (reps < 1 || reps > 200) { fprintf(stderr, "bench matmul: reps must be 1..200\n"); return 2; }
    oc_cl_device *dev = NULL;
    oc_error err;
    if (oc_cl_open(&dev, device, NULL, NULL, &err) != OC_OK) { fprintf(stderr, "bench matmul: %s\n", err.message); return 1; }
    const oc_cl_caps *c = oc_cl_device_caps(dev);
    double peak = 0;
    int ok = oc_cl_fma_peak(dev, &peak, &err) == OC_OK;
    printf("matmul bench (OpenCL): platform '%s', device %d '%s' (%s), CLBlast %s\n", c->platform, c->index, c->device,
           c->version, oc_cl_has_clblast(dev) ? "yes" : "no");
    printf("FP32 FMA peak (opencl/kernels/peak.cl): %.1f GFLOP/s\n\n", peak);
    printf("| weight | GEMM %dx%d->%d ms | GFLOP/s | peak | GEMV ms | GB/s (W) |\n", N_TOK, N_IN, N_OUT);
    printf("|--------|------------------|---------|------|---------|----------|\n");
    float *hx = malloc(sizeof(float) * N_TOK * N_IN), *hw = malloc(sizeof(float) * N_IN);
    oc_cl_buf *x = NULL, *y = NULL;
    ok = ok && hx && hw && oc_cl_buf_alloc(dev, sizeof(float) * N_TOK * N_IN, &x, &err) == OC_OK &&
         oc_cl_buf_alloc(dev, sizeof(float) * N_TOK * N_OUT, &y, &err) == OC_OK;
    uint64_t s = 42;
    for (int i = 0; ok && i < N_TOK * N_IN; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        hx[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
    }
    ok = ok && oc_cl_upload(dev, x, 0, hx, sizeof(float) * N_TOK * N_IN, &err) == OC_OK;
    static const int32_t types[] = { OC_DTYPE_F16, OC_DTYPE_Q8_0, OC_DTYPE_Q4_0, OC_DTYPE_F32, OC_DTYPE_F32 };
    for (int t = 0; ok && t < (int)(sizeof types / sizeof types[0]); t++) {
        int32_t dt = types[t];
        int clblast = t == 3;
        if (clblast && !oc_cl_has_clblast(dev)) continue;
        oc_cl_use_clblast(dev, clblast);
        size_t row = (size_t)oc_dtype_row_bytes(dt, N_IN);
        unsigned char *hb = malloc(row * N_OUT);
        ok = hb != NULL;
        for (int o = 0; ok && o < N_OUT; o++) {
            for (int i = 0; i < N_IN; i++) {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                hw[i] = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
            }
            unsigned char *r = hb + (size_t)o * row;
            if (dt == OC_DTYPE_F32) memcpy(r, hw, row);
            else if (dt == OC_DTYPE_F16) for (int i = 0; i < N_IN; i++) ((uint16_t *)r)[i] = oc_f32_to_f16(hw[i]);
            else if (dt == OC_DTYPE_Q8_0) oc_quantize_q8_0(hw, r, N_IN);
            else oc_quantize_q4_0(hw, r, N_IN);
        }
        oc_weight w = { dt, N_IN, N_OUT, hb, row };
        oc_cl_weight cw;
        ok = ok && oc_cl_weight_upload(dev, &w, 0, &cw, &err) == OC_OK;
        free(hb);
        if (!ok) break;
        double gemm = time_matmul(dev, &cw, x, y, N_TOK, reps), gemv = time_matmul(dev, &cw, x, y, 1, 10 * reps);
        ok = gemm > 0 && gemv > 0;
        if (ok) {
            double gf = 2.0 * N_TOK * N_IN * N_OUT / (gemm * 1e-3) / 1e9;
            char name[24];
            snprintf(name, sizeof name, "%s%s", oc_dtype_name(dt), dt == OC_DTYPE_F32 ? (clblast ? " clblast" : " own") : "");
            printf("| %-11s | %16.2f | %7.1f | %3.0f%% | %7.3f | %8.1f |\n", name, gemm, gf, 100 * gf / peak, gemv,
                   (double)row * N_OUT / (gemv * 1e-3) / 1e9);
        }
        oc_cl_weight_free(&cw);
    }
    if (!ok) fprintf(stderr, "bench matmul: %s\n", err.message);
    free(hx); free(hw);
    oc_cl_buf_free(x); oc_cl_buf_free(y);
    oc_cl_close(dev);
    return ok ? 0 : 1;
}

#else

int bench_matmul_cl(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "bench matmul: this build has no OpenCL backend (./configure found no OpenCL)\n");
    return 1;
}

#endif
