/* bench_attention_cl.c: `ocellus bench attention --backend opencl [--device N|NAME]`: the OpenCL
 * attention kernel (opencl/cl_attn.c, opencl/kernels/attn.cl) at the CPU bench's shapes (bench_attention.c):
 *  (a) decoder layer, 12 q / 2 kv heads, d 128, causal, 8 images x 1024 tokens + 100 text tokens
 *      (and 16 x 2048 + 100 unless --quick), dense and with the 7-of-12 sparse plan;
 *  (b) vision layer, 16 heads, d 80, 4096 patches, bidirectional (and d 72 at 1024 patches);
 *  (c) decode, one query against 16384 keys, 12 / 2 heads, d 128 (stacked heads, key split).
 * Prints the platform and device, the device's FP32 FMA peak measured in the same run
 * (opencl/kernels/peak.cl), GFLOP/s of useful work (4 d per kept pair) and its fraction of the peak, and
 * for the sparse plan the time ratio against the FLOP ratio (target <= 1.2).
 * Times are the best of the runs, from enqueue to clFinish (the first one of a case also compiles
 * the kernel for its work-group size on some drivers: use --reps >= 2 for clean numbers);
 * K/V f16, Q and the output f32. --tiles runs every case once per attention tile shape (the
 * device opened again, forced to it: opencl/cl_device.h oc_cl_options) and ends with the best tile
 * per case; a tile whose local memory exceeds the device's at a case's head dim prints n/a. */
#include "bench.h"
#include "tools/tools.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if OC_HAVE_OPENCL

#include "opencl/cl_attn.h"
#include "opencl/cl_ops.h"
#include "core/f16.h"
#include "port.h"

#include <math.h>

#define MAX_TILES 16
#define MAX_ROWS 8   /* cases that print a time row */

typedef struct bench_cl {
    oc_cl_device *dev;
    double peak;
    int reps;
    double budget_ms;   /* stop repeating a case after this much time */
    char tile[24];      /* the open device's tile, e.g. "4x4@8x8" */
    int tile_index, n_rows;
    char row_name[MAX_ROWS][48];
    double best_ms[MAX_ROWS];   /* per case row: the best time over the tiles so far */
    int best_tile[MAX_ROWS];
} bench_cl;

/* The buffers of one shape: q, out [n][H][d] f32; k, v [n][Hkv][d] f16; patterns of 12 heads. */
typedef struct shape {
    int n_q, n_kv, H, Hkv, d;
    oc_cl_buf *q, *k, *v, *out, *pat;
    oc_cl_attn *at;
} shape;

static void shape_free(shape *s) {
    oc_cl_buf_free(s->q); oc_cl_buf_free(s->k); oc_cl_buf_free(s->v); oc_cl_buf_free(s->out); oc_cl_buf_free(s->pat);
    oc_cl_attn_close(s->at);
}

static int shape_make(bench_cl *B, shape *s, int n_q, int n_kv, int H, int Hkv, int d) {
    memset(s, 0, sizeof *s);
    s->n_q = n_q; s->n_kv = n_kv; s->H = H; s->Hkv = Hkv; s->d = d;
    size_t nq = (size_t)n_q * H * d, nkv = (size_t)n_kv * Hkv * d;
    float *hq = malloc(sizeof(float) * nq);
    uint16_t *hk = malloc(2 * nkv), *hv = malloc(2 * nkv);
    oc_error err;
    int ok = hq && hk && hv;
    uint64_t r = 0x243f6a8885a308d3ULL;
    for (size_t i = 0; ok && i < nq; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        hq[i] = (float)((r >> 40) & 0xffff) / 16384.0f - 2.0f;
    }
    for (size_t i = 0; ok && i < nkv; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        hk[i] = oc_f32_to_f16((float)((r >> 40) & 0xffff) / 32768.0f - 1.0f);
        hv[i] = oc_f32_to_f16((float)((r >> 24) & 0xffff) / 32768.0f - 1.0f);
    }
    oc_cl_attn_limits lim = { n_q, H, Hkv, d, 64, 0, 0, 0 };   /* static patterns only */
    oc_status st = ok ? OC_OK : oc_fail(&err, OC_ERR_NOMEM, "out of host memory");
    if (st == OC_OK) st = oc_cl_buf_alloc(B->dev, sizeof(float) * nq, &s->q, &err);
    if (st == OC_OK) st = oc_cl_buf_alloc(B->dev, sizeof(float) * nq, &s->out, &err);
    if (st == OC_OK) st = oc_cl_buf_alloc(B->dev, 2 * nkv, &s->k, &err);
    if (st == OC_OK) st = oc_cl_buf_alloc(B->dev, 2 * nkv, &s->v, &err);
    if (st == OC_OK) st = oc_cl_buf_alloc(B->dev, sizeof(int32_t) * OC_CL_PATTERN_INTS * 12, &s->pat, &err);
    if (st == OC_OK) st = oc_cl_upload(B->dev, s->q, 0, hq, sizeof(float) * nq, &err);
    if (st == OC_OK) st = oc_cl_upload(B->dev, s->k, 0, hk, 2 * nkv, &err);
    if (st == OC_OK) st = oc_cl_upload(B->dev, s->v, 0, hv, 2 * nkv, &err);
    if (st == OC_OK && H == 12) st = oc_cl_patterns_write(B->dev, s->pat, 0, bench_sparse_plan, 12, &err);
    if (st == OC_OK) st = oc_cl_attn_open(&s->at, B->dev, &lim, &err);
    free(hq); free(hk); free(hv);
    if (st == OC_ERR_UNSUPPORTED) return -1;   /* this tile does not fit this head dim */
    if (st != OC_OK) fprintf(stderr, "bench attention: %s\n", err.message);
    return st == OC_OK;
}

/* The row of a case this tile cannot run. */
static void print_na(bench_cl *B, const char *name, const char *dims) {
    printf("| %-36s | %-13s | %-9s | %9s | %8s | %8s | %6s |\n", name, dims, B->tile, "n/a", "", "", "");
}

/* The call of shape s: n_q queries at q_offset against n_kv keys, with the given mask and layout. */
static oc_attn_call call_of(const shape *s, int32_t q_offset, oc_attn_mask_kind mask, const oc_token_layout *layout) {
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = s->n_q; a.n_kv = s->n_kv; a.n_head = s->H; a.n_head_kv = s->Hkv; a.head_dim = s->d;
    a.q_stride_token = (int64_t)s->H * s->d; a.q_stride_head = s->d;
    a.kv_dtype = OC_DTYPE_F16;
    a.k_stride_token = a.v_stride_token = (int64_t)s->Hkv * s->d;
    a.k_stride_head = a.v_stride_head = s->d;
    a.out_stride_token = (int64_t)s->H * s->d; a.out_stride_head = s->d;
    a.scale = 1.0f / sqrtf((float)s->d);
    a.mask = mask;
    a.q_offset = q_offset;
    a.layout = layout;
    return a;
}

typedef struct result {
    double ms;
    oc_attn_stats st;
} result;

/* Up to reps timed runs (fewer once budget_ms have passed): best time. The first run also counts
 * the kept pairs (a few integer adds per score and one small download; the counts are exact). */
static int time_case(bench_cl *B, shape *s, const oc_attn_call *call, int sparse, int reps, result *res) {
    oc_error err;
    oc_cl_attn_bufs io = { s->q, s->k, s->v, s->out, sparse ? s->pat : NULL, 0 };
    memset(res, 0, sizeof *res);
    res->ms = 1e300;
    if (oc_cl_attn_prepare(s->at, call, &err) != OC_OK) {   /* the upload stays out of the timed runs */
        fprintf(stderr, "bench attention: %s\n", err.message);
        return 0;
    }
    double total = 0;
    for (int rep = 0; rep < reps && (rep == 0 || total < B->budget_ms); rep++) {
        uint64_t t0 = oc_port_now_ns();
        if (oc_cl_attn_run(s->at, call, &io, rep == 0 ? &res->st : NULL, &err) != OC_OK || oc_cl_finish(B->dev, &err) != OC_OK) {
            fprintf(stderr, "bench attention: %s\n", err.message);
            return 0;
        }
        double ms = (double)(oc_port_now_ns() - t0) * 1e-6;
        total += ms;
        if (ms < res->ms) res->ms = ms;
    }
    return 1;
}

static void print_row(bench_cl *B, const char *name, const char *dims, const result *r) {
    double gflops = (double)r->st.flops_kept / (r->ms * 1e-3) / 1e9;
    printf("| %-36s | %-13s | %-9s | %9.2f | %8.1f | %8.1f | %5.1f%% |\n", name, dims, B->tile, r->ms,
           (double)r->st.flops_kept / 1e9, gflops, 100.0 * gflops / B->peak);
    int k = 0;
    while (k < B->n_rows && strcmp(B->row_name[k], name)) k++;
    if (k == MAX_ROWS) return;
    if (k == B->n_rows) {
        snprintf(B->row_name[k], sizeof B->row_name[k], "%s", name);
        B->best_ms[k] = 1e300;
        B->n_rows++;
    }
    if (r->ms < B->best_ms[k]) {
        B->best_ms[k] = r->ms;
        B->best_tile[k] = B->tile_index;
    }
}

static int bench_decoder(bench_cl *B, int n_images, int image_tokens) {
    oc_token_layout *layout = NULL;
    int n;
    if (!bench_decoder_layout(n_images, image_tokens, &layout, &n)) return 0;
    shape s;
    char name[64], dims[32];
    snprintf(dims, sizeof dims, "%d x %d", n, n);
    int ok = shape_make(B, &s, n, n, 12, 2, 128);
    if (ok < 0) {
        snprintf(name, sizeof name, "(a) decoder %dx%d+100, dense", n_images, image_tokens);
        print_na(B, name, dims);
        shape_free(&s);
        oc_layout_free(layout);
        return 1;
    }
    result dense = { 1e300, { 0, 0, 0 } }, sparse = dense, r;
    oc_attn_call dgeo = call_of(&s, 0, OC_ATTN_CAUSAL, NULL), sgeo = call_of(&s, 0, OC_ATTN_CAUSAL, layout);
    /* dense and sparse alternate, so a busy device disturbs both alike; best of each */
    for (int rep = 0; ok && rep < B->reps; rep++) {
        ok = time_case(B, &s, &dgeo, 0, 1, &r);
        if (ok && r.ms < dense.ms) dense = r;
        ok = ok && time_case(B, &s, &sgeo, 1, 1, &r);
        if (ok && r.ms < sparse.ms) sparse = r;
        if (rep >= 1 && dense.ms + sparse.ms > B->budget_ms) break;
    }
    if (ok) {
        snprintf(name, sizeof name, "(a) decoder %dx%d+100, dense", n_images, image_tokens);
        print_row(B, name, dims, &dense);
        snprintf(name, sizeof name, "(a) decoder %dx%d+100, 7/12 sparse", n_images, image_tokens);
        print_row(B, name, dims, &sparse);
        double flop_ratio = (double)sparse.st.flops_kept / (double)dense.st.flops_kept;
        double time_ratio = sparse.ms / dense.ms;
        double skipped = (double)sparse.st.flops_skipped / (double)(sparse.st.flops_kept + sparse.st.flops_skipped);
        printf("|   sparse plan: FLOPs skipped %.1f%%, FLOP ratio %.3f, time ratio %.3f, time/FLOP ratio %.2f "
               "(target <= 1.2); executed/kept %.3f | | | | | | |\n", 100 * skipped, flop_ratio, time_ratio,
               time_ratio / flop_ratio, (double)sparse.st.flops_executed / (double)sparse.st.flops_kept);
    }
    shape_free(&s);
    oc_layout_free(layout);
    return ok;
}

static int bench_vision(bench_cl *B, int n, int d, const char *name) {
    shape s;
    char dims[32];
    snprintf(dims, sizeof dims, "%d x %d", n, n);
    int ok = shape_make(B, &s, n, n, 16, 16, d);
    oc_attn_call geo = call_of(&s, 0, OC_ATTN_BIDIRECTIONAL, NULL);
    result r;
    if (ok < 0) print_na(B, name, dims);
    ok = ok < 0 || (ok && time_case(B, &s, &geo, 0, B->reps, &r));
    if (ok && s.at) print_row(B, name, dims, &r);
    shape_free(&s);
    return ok;
}

static int bench_decode(bench_cl *B) {
    const int n_kv = 16384;
    shape s;
    int ok = shape_make(B, &s, 1, n_kv, 12, 2, 128);
    oc_attn_call geo = call_of(&s, n_kv - 1, OC_ATTN_CAUSAL, NULL);
    result r;
    if (ok < 0) print_na(B, "(c) decode, 16384 keys", "1 x 16384");
    ok = ok < 0 || (ok && time_case(B, &s, &geo, 0, 50 * B->reps, &r));
    if (ok && s.at) {
        print_row(B, "(c) decode, 16384 keys", "1 x 16384", &r);
        printf("|   decode reads K+V f16 at %.1f GB/s | | | | | | |\n", 2.0 * 2 * n_kv * 2 * 128 / (r.ms * 1e-3) / 1e9);
    }
    shape_free(&s);
    return ok;
}

/* One tile spec "RxK" or "RxK@GRxGC" (rows x keys per item, on row groups x key groups items;
 * default 8 x 8) into opt; 0 when it is not one. */
static int parse_tile(const char *spec, size_t n, oc_cl_options *opt) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, spec, n);
    buf[n] = 0;
    int rpt = 0, kpt = 0, rg = 8, cg = 8, used = 0, used2 = 0;
    if (sscanf(buf, "%dx%d%n", &rpt, &kpt, &used) != 2) return 0;
    if (buf[used] == '@' && (sscanf(buf + used + 1, "%dx%d%n", &rg, &cg, &used2) != 2 || buf[used + 1 + used2])) return 0;
    if (buf[used] && buf[used] != '@') return 0;
    if (rpt < 1 || kpt < 1 || rg < 1 || cg < 1) return 0;
    memset(opt, 0, sizeof *opt);
    opt->attn_rows_per_item = rpt;
    opt->attn_keys_per_item = kpt;
    opt->attn_row_groups = rg;
    opt->attn_key_groups = cg;
    return 1;
}

/* Every case at the open device's tile. */
static int run_cases(bench_cl *B, const char *only, int quick, int n_images, int image_tokens) {
    const oc_cl_caps *c = oc_cl_device_caps(B->dev);
    snprintf(B->tile, sizeof B->tile, "%dx%d@%dx%d", c->attn_rows_per_item, c->attn_keys_per_item, c->attn_row_groups,
             c->attn_key_groups);
    int ok = 1;
    if (strchr(only, 'a')) ok = bench_decoder(B, n_images, image_tokens);
    if (ok && strchr(only, 'a') && !quick) ok = bench_decoder(B, 16, 2048);
    if (ok && strchr(only, 'b')) ok = bench_vision(B, 4096, 80, "(b) vision 4096 patches, full");
    if (ok && strchr(only, 'b')) ok = bench_vision(B, 1024, 72, "(b) head dim 72, 1024 patches");
    if (ok && strchr(only, 'c')) ok = bench_decode(B);
    return ok;
}

int bench_attention_cl(int argc, char **argv) {
    const char *device = NULL, *only = "abc", *tiles = NULL;
    int quick = 0, n_images = 8, image_tokens = 1024, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            if (strcmp(argv[++i], "opencl")) { fprintf(stderr, "bench attention: unknown backend '%s'\n", argv[i]); return 2; }
        } else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--images") && i + 1 < argc) { if (!oc_tool_int_arg("bench attention", argv[i], argv[i + 1], 1, 1024, &n_images)) return 2; i++; }
        else if (!strcmp(argv[i], "--image-tokens") && i + 1 < argc) { if (!oc_tool_int_arg("bench attention", argv[i], argv[i + 1], 1, 1048576, &image_tokens)) return 2; i++; }
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) { if (!oc_tool_int_arg("bench attention", argv[i], argv[i + 1], 1, 200, &reps)) return 2; i++; }
        else if (!strcmp(argv[i], "--tiles") && i + 1 < argc) tiles = argv[++i];
        else {
            fprintf(stderr, "usage: ocellus bench attention --backend opencl [--device N|NAME] [--quick] [--only abc]\n"
                            "         [--images N --image-tokens M] [--reps N] [--tiles LIST]\n"
                            "  --device N|NAME  device index or name substring (default: the first GPU)\n"
                            "  --quick  skip the 16 x 2048 image prompt (33K tokens)\n"
                            "  --tiles  attention tile shapes to compare, comma-separated RxK[@GRxGC]: R query rows x\n"
                            "           K keys per work-item on GR x GC work-items (default 8x8; GC 4, 8 or 16), e.g.\n"
                            "           4x4,2x4@16x8,6x2 (default: the device's own tile)\n");
            return !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ? 0 : 2;
        }
    }
    if (n_images < 0 || n_images > 40 || image_tokens < 1 || reps < 1) {
        fprintf(stderr, "bench attention: need 0..40 images of >= 1 token and reps >= 1\n");
        return 2;
    }
    oc_cl_options opts[MAX_TILES];
    int n_tiles = 0;
    for (const char *p = tiles; p && *p;) {
        size_t n = strcspn(p, ",");
        if (n_tiles == MAX_TILES || !parse_tile(p, n, &opts[n_tiles])) {
            fprintf(stderr, "bench attention: --tiles: '%.*s' is not RxK or RxK@GRxGC (at most %d of them)\n", (int)n, p,
                    MAX_TILES);
            return 2;
        }
        n_tiles++;
        p += n + (p[n] == ',');
    }
    bench_cl B;
    memset(&B, 0, sizeof B);
    B.reps = reps;
    B.budget_ms = 2000;
    oc_error err;
    int ok = 1;
    for (int t = 0; ok && t < (n_tiles ? n_tiles : 1); t++) {
        uint64_t t0 = oc_port_now_ns();
        oc_status st = oc_cl_open(&B.dev, device, n_tiles ? &opts[t] : NULL, NULL, &err);
        if (st == OC_ERR_INVALID && n_tiles) {   /* a tile the kernel does not take: say so, go on */
            printf("| %s |\n", err.message);
            continue;
        }
        if (st != OC_OK) {
            fprintf(stderr, "bench attention: %s\n", err.message);
            return 1;
        }
        B.tile_index = t;
        if (B.peak == 0) {   /* the first device that opened */
            const oc_cl_caps *c = oc_cl_device_caps(B.dev);
            printf("attention bench (OpenCL): platform '%s', device %d '%s' (%s, driver %s), %u compute units, local "
                   "memory %llu bytes, programs built in %.2f s\n", c->platform, c->index, c->device, c->version,
                   c->driver, c->compute_units, (unsigned long long)c->local_mem_bytes,
                   (double)(oc_port_now_ns() - t0) * 1e-9);
            if (oc_cl_fma_peak(B.dev, &B.peak, &err) != OC_OK) {
                fprintf(stderr, "bench attention: %s\n", err.message);
                oc_cl_close(B.dev);
                return 1;
            }
            printf("FP32 FMA peak (opencl/kernels/peak.cl, measured now): %.1f GFLOP/s; K/V f16; tile RxK@GRxGC: R query rows x "
                   "K keys per item on GR x GC items\n\n", B.peak);
            printf("| %-36s | %-13s | %-9s | %9s | %8s | %8s | %6s |\n", "case", "n_q x n_kv", "tile", "time ms", "GFLOP",
                   "GFLOP/s", "peak");
            printf("|--------------------------------------|---------------|-----------|-----------|----------|----------|"
                   "--------|\n");
        }
        ok = run_cases(&B, only, quick, n_images, image_tokens);
        if (t + 1 < (n_tiles ? n_tiles : 1)) {
            oc_cl_close(B.dev);
            B.dev = NULL;
        }
    }
    if (!B.dev && B.peak > 0) oc_cl_open(&B.dev, device, NULL, NULL, &err);   /* the last tile did not open */
    if (ok && n_tiles > 1) {
        printf("\nbest tile per case:\n");
        for (int k = 0; k < B.n_rows; k++) {
            const oc_cl_options *o = &opts[B.best_tile[k]];
            printf("  %-36s %dx%d@%dx%d  %.2f ms\n", B.row_name[k], o->attn_rows_per_item, o->attn_keys_per_item,
                   o->attn_row_groups, o->attn_key_groups, B.best_ms[k]);
        }
    }
    double again = 0;
    if (B.dev && oc_cl_fma_peak(B.dev, &again, &err) == OC_OK)
        printf("\nFMA peak measured again after the cases: %.1f GFLOP/s (fractions above use %.1f)\n", again, B.peak);
    oc_cl_close(B.dev);
    return ok && B.peak > 0 ? 0 : 1;   /* no tile opened: failure */
}

#else

int bench_attention_cl(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "bench attention: this build has no OpenCL backend (./configure found no OpenCL)\n");
    return 1;
}

#endif
