/* bench_attention.c: `ocellus bench attention [-t N] [--quick] [--isa NAME] [--cpu-time]`: the attention engine
 * (src/attention/attn.c) on Qwen2-VL-2B shapes, against this machine's FP32 FMA peak measured here:
 *  (a) decoder layer, 12 q / 2 kv heads, d 128, causal: 8 images x 1024 tokens + 100 text tokens,
 *      and 16 x 2048 + 100 (skipped by --quick), each dense and with a plan of 7 of 12 heads sparse
 *      (Sink, Intra-Image, Intra-Image+Sink, A-shape(128, 1024));
 *  (b) vision layer, 16 heads, d 80, 4096 patches, bidirectional (and d 72 at 1024 patches);
 *  (c) decode, one query against 16384 keys, 12 / 2 heads, d 128;
 *  (d) only with --only d: MMInference's Vertical-Slash and Grid vs dense at 8K, 33K and 66K tokens
 *      (bench_mminf.c).
 * Useful FLOPs = 4 * d per kept (query, key) pair (halved by causality, as the anchors count them).
 * The peak comes from examples/tools/roofline.h, the same measurement `ocellus bench matmul` reports. */
#include "attention/attn.h"
#include "bench.h"
#include "tools/tools.h"
#include "core/isa.h"
#include "attention/layout.h"
#include "core/pool.h"
#include "tools/roofline.h"
#include "port.h"
#include "core/f16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAT(kind_, sink_, local_) { .kind = (kind_), .n_sink = (sink_), .n_local = (local_) }

/* ---- attention cases --------------------------------------------------------------------------------- */

typedef struct bench_bufs {
    float *q, *out;
    uint16_t *k, *v;
    void *scratch;
    size_t scratch_bytes;
} bench_bufs;

typedef struct bench_result {
    double ms;
    double cpu_ms;   /* process CPU time during the run: all threads together */
    oc_attn_stats st;
} bench_result;

static int bufs_alloc(bench_bufs *b, int n_q, int n_kv, int n_head, int n_head_kv, int d, int n_threads) {
    memset(b, 0, sizeof *b);
    b->q = malloc(sizeof(float) * (size_t)n_q * n_head * d);
    b->out = malloc(sizeof(float) * (size_t)n_q * n_head * d);
    b->k = malloc(2 * (size_t)n_kv * n_head_kv * d);
    b->v = malloc(2 * (size_t)n_kv * n_head_kv * d);
    oc_attn_dims dims = { n_q, n_kv, n_head, n_head_kv, d };
    b->scratch_bytes = oc_attn_scratch_bytes(&dims, n_threads);
    b->scratch = oc_port_aligned_alloc(OC_MEM_ALIGN, b->scratch_bytes);
    if (!b->q || !b->out || !b->k || !b->v || !b->scratch) return 0;
    uint64_t s = 0x243f6a8885a308d3ULL;
    for (size_t i = 0; i < (size_t)n_q * n_head * d; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        b->q[i] = (float)((s >> 40) & 0xffff) / 16384.0f - 2.0f;
    }
    for (size_t i = 0; i < (size_t)n_kv * n_head_kv * d; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        b->k[i] = oc_f32_to_f16((float)((s >> 40) & 0xffff) / 32768.0f - 1.0f);
        b->v[i] = oc_f32_to_f16((float)((s >> 24) & 0xffff) / 32768.0f - 1.0f);
    }
    return 1;
}

static void bufs_free(bench_bufs *b) {
    free(b->q); free(b->out); free(b->k); free(b->v);
    oc_port_aligned_free(b->scratch);
}

/* Runs the call until min_total_ms have passed (at least once, at most max_reps); best time. */
static int time_call(const oc_attn_call *a, oc_isa isa, oc_pool *pool, bench_bufs *b, double min_total_ms,
                     int max_reps, bench_result *res) {
    oc_attn_host mem = { b->q, b->k, b->v, b->out };
    double total = 0;
    res->ms = 1e300;
    for (int rep = 0; rep < max_reps && (rep == 0 || total < min_total_ms); rep++) {
        oc_attn_stats st = { 0, 0, 0 };
        oc_error err;
        clock_t c0 = clock();
        uint64_t t0 = oc_port_now_ns();
        if (oc_attn_run(a, &mem, isa, pool, b->scratch, b->scratch_bytes, &st, &err) != OC_OK) {
            fprintf(stderr, "bench attention: %s\n", err.message);
            return 0;
        }
        double ms = (double)(oc_port_now_ns() - t0) * 1e-6;
        double cpu_ms = (double)(clock() - c0) * 1000.0 / CLOCKS_PER_SEC;
        total += ms;
        if (ms < res->ms) { res->ms = ms; res->cpu_ms = cpu_ms; res->st = st; }
    }
    return 1;
}

static oc_attn_call call_for(int n_q, int n_kv, int n_head, int n_head_kv, int d) {
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = n_q; a.n_kv = n_kv; a.n_head = n_head; a.n_head_kv = n_head_kv; a.head_dim = d;
    a.q_stride_token = (int64_t)n_head * d; a.q_stride_head = d;
    a.kv_dtype = OC_DTYPE_F16;
    a.k_stride_token = a.v_stride_token = (int64_t)n_head_kv * d;
    a.k_stride_head = a.v_stride_head = d;
    a.out_stride_token = (int64_t)n_head * d; a.out_stride_head = d;
    a.scale = 1.0f / sqrtf((float)d);
    a.mask = OC_ATTN_CAUSAL;
    return a;
}

/* "cpu" is the CPU time the threads got over wall time x threads: below ~95% other processes
 * took cores away during the run, and the fraction of peak understates the engine. */
static void print_row(const char *name, const char *shape, const bench_result *r, double peak, int n_threads) {
    double gflops = (double)r->st.flops_kept / (r->ms * 1e-3) / 1e9;
    printf("| %-36s | %-13s | %9.1f | %8.1f | %7.1f | %4.0f%% | %4.0f%% |\n", name, shape, r->ms,
           (double)r->st.flops_kept / 1e9, gflops, 100.0 * gflops / peak, 100.0 * r->cpu_ms / (r->ms * n_threads));
}

/* 7 of 12 heads sparse, every category, both kv groups mixed */
const oc_head_pattern bench_sparse_plan[12] = {
    PAT(OC_PATTERN_DENSE, 0, 0), PAT(OC_PATTERN_DENSE, 0, 0), PAT(OC_PATTERN_SINK, 0, 0),
    PAT(OC_PATTERN_INTRA_IMAGE, 0, 0), PAT(OC_PATTERN_INTRA_IMAGE_SINK, 0, 0), PAT(OC_PATTERN_A_SHAPE, 128, 1024),
    PAT(OC_PATTERN_DENSE, 0, 0), PAT(OC_PATTERN_DENSE, 0, 0), PAT(OC_PATTERN_DENSE, 0, 0),
    PAT(OC_PATTERN_SINK, 0, 0), PAT(OC_PATTERN_INTRA_IMAGE_SINK, 0, 0), PAT(OC_PATTERN_INTRA_IMAGE, 0, 0),
};

/* 20 text tokens, then per image: <vision_start>, the image, <vision_end>; then text to 100. */
int bench_decoder_layout(int n_images, int image_tokens, oc_token_layout **out, int *n_tokens) {
    oc_token_span spans[64];
    int pos = 20;
    for (int g = 0; g < n_images; g++) {
        spans[g].start = pos + 1;
        spans[g].end = pos + 1 + image_tokens;
        pos += image_tokens + 2;
    }
    *n_tokens = pos + (100 - 20 - 2 * n_images);
    oc_error err;
    if (oc_layout_build(out, *n_tokens, spans, n_images, OC_LAYOUT_DEFAULT_SINK_FRACTION, NULL, &err) != OC_OK) {
        fprintf(stderr, "bench attention: %s\n", err.message);
        return 0;
    }
    return 1;
}

/* (a): dense and sparse for one prompt shape. */
static int bench_decoder(oc_pool *pool, int n_threads, oc_isa isa, int n_images, int image_tokens, double peak,
                         int reps) {
    const int H = 12, Hkv = 2, d = 128;
    oc_token_layout *layout = NULL;
    int n;
    if (!bench_decoder_layout(n_images, image_tokens, &layout, &n)) return 0;
    bench_bufs b;
    if (!bufs_alloc(&b, n, n, H, Hkv, d, n_threads)) {
        fprintf(stderr, "bench attention: out of memory\n");
        bufs_free(&b);
        oc_layout_free(layout);
        return 0;
    }
    oc_attn_call a = call_for(n, n, H, Hkv, d);
    const oc_head_pattern *plan = bench_sparse_plan;
    double budget = n > 20000 ? 0 : 2000;
    bench_result dense_best = { 1e300, 0, { 0, 0, 0 } }, sparse_best = { 1e300, 0, { 0, 0, 0 } };
    bench_result dense, sparse;
    char name[64], shape[32];
    snprintf(shape, sizeof shape, "%d x %d", n, n);
    /* dense and sparse alternate, so a busy machine disturbs both alike; best of each */
    int ok = 1;
    for (int rep = 0; ok && rep < reps; rep++) {
        a.patterns = NULL;
        a.layout = NULL;
        ok = time_call(&a, isa, pool, &b, 0, 1, &dense);
        a.patterns = plan;
        a.layout = layout;
        ok = ok && time_call(&a, isa, pool, &b, 0, 1, &sparse);
        if (dense.ms < dense_best.ms) dense_best = dense;
        if (sparse.ms < sparse_best.ms) sparse_best = sparse;
        if (n > 20000) break;   /* 33K tokens: one run each */
        if (rep >= 1 && dense_best.ms + sparse_best.ms > budget) break;
    }
    dense = dense_best;
    sparse = sparse_best;
    if (ok) {
        snprintf(name, sizeof name, "(a) decoder %dx%d+100, dense", n_images, image_tokens);
        print_row(name, shape, &dense, peak, n_threads);
        snprintf(name, sizeof name, "(a) decoder %dx%d+100, 7/12 sparse", n_images, image_tokens);
        print_row(name, shape, &sparse, peak, n_threads);
        double flop_ratio = (double)sparse.st.flops_kept / (double)dense.st.flops_kept;
        double time_ratio = sparse.ms / dense.ms;
        double skipped = (double)sparse.st.flops_skipped / (double)(sparse.st.flops_kept + sparse.st.flops_skipped);
        double cpu_ratio = sparse.cpu_ms / dense.cpu_ms;
        printf("|   sparse plan: FLOPs skipped %.1f%%, FLOP ratio %.3f, time ratio %.3f, time/FLOP ratio %.2f "
               "(target <= 1.15; in CPU time %.2f); executed/kept %.3f | | | | | | |\n", 100 * skipped, flop_ratio,
               time_ratio, time_ratio / flop_ratio, cpu_ratio / flop_ratio,
               (double)sparse.st.flops_executed / (double)sparse.st.flops_kept);
    }
    bufs_free(&b);
    oc_layout_free(layout);
    return ok;
}

static int bench_vision(oc_pool *pool, int n_threads, oc_isa isa, double peak, int reps, int n, int d,
                        const char *name, int bf16_products) {
    const int H = 16;
    bench_bufs b;
    if (!bufs_alloc(&b, n, n, H, H, d, n_threads)) {
        fprintf(stderr, "bench attention: out of memory\n");
        bufs_free(&b);
        return 0;
    }
    oc_attn_call a = call_for(n, n, H, H, d);
    a.mask = OC_ATTN_BIDIRECTIONAL;
    a.bf16_products = bf16_products;   /* as the vision encoder's calls (attn_call.h) */
    bench_result r;
    int ok = time_call(&a, isa, pool, &b, 2000, reps, &r);
    char shape[32];
    snprintf(shape, sizeof shape, "%d x %d", n, n);
    if (ok) print_row(name, shape, &r, peak, n_threads);
    bufs_free(&b);
    return ok;
}

#define DECODE_ROTATE_BYTES ((size_t)1 << 30)   /* > the L3 of every machine here (260 MiB on the Xeon) */

static int cmp_dbl(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Case (c) with the cache in DRAM, as in a real decode (28 layers x 16 MiB of K+V at 16K tokens do
 * not stay in any L3): every call reads the next of n copies of K and V (1 GiB in all), and next to
 * it a read-only pass (roofline.h) over as many bytes of another copy, in alternating order; the
 * ratio is the median over calls of attention time / read time. CPU share over the whole loop. */
static int bench_decode_dram(oc_pool *pool, int n_threads, oc_isa isa, const bench_bufs *b, const oc_attn_call *a,
                             size_t kv_bytes) {
    size_t n_copies = DECODE_ROTATE_BYTES / (2 * kv_bytes);
    unsigned char *all = oc_port_aligned_alloc(OC_MEM_ALIGN, n_copies * 2 * kv_bytes);
    enum { N = 41 };
    double t_attn[N], ratio[N], t_read[N];
    if (!all || n_copies < 4) { oc_port_aligned_free(all); fprintf(stderr, "bench attention: out of memory\n"); return 0; }
    for (size_t c = 0; c < n_copies; c++) {
        memcpy(all + 2 * c * kv_bytes, b->k, kv_bytes);
        memcpy(all + (2 * c + 1) * kv_bytes, b->v, kv_bytes);
    }
    clock_t c0 = clock();
    uint64_t w0 = oc_port_now_ns();
    int ok = 1;
    for (int r = 0; r < N + (int)n_copies && ok; r++) {
        size_t c = (size_t)r % n_copies, other = ((size_t)r + n_copies / 2) % n_copies;
        oc_attn_host mem = { b->q, all + 2 * c * kv_bytes, all + (2 * c + 1) * kv_bytes, b->out };
        oc_error err;
        double rd = 0;
        if (r % 2) rd = oc_roofline_read_seconds(pool, all + 2 * other * kv_bytes, 2 * kv_bytes);
        uint64_t t0 = oc_port_now_ns();
        if (oc_attn_run(a, &mem, isa, pool, b->scratch, b->scratch_bytes, NULL, &err) != OC_OK) {
            fprintf(stderr, "bench attention: %s\n", err.message);
            ok = 0;
        }
        double s = (double)(oc_port_now_ns() - t0) * 1e-9;
        if (!(r % 2)) rd = oc_roofline_read_seconds(pool, all + 2 * other * kv_bytes, 2 * kv_bytes);
        if (r >= (int)n_copies) {
            t_attn[r - (int)n_copies] = s;
            t_read[r - (int)n_copies] = rd;
            ratio[r - (int)n_copies] = s / rd;
        }
    }
    double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC, wall = (double)(oc_port_now_ns() - w0) * 1e-9;
    if (ok) {
        qsort(t_attn, N, sizeof(double), cmp_dbl);
        qsort(t_read, N, sizeof(double), cmp_dbl);
        qsort(ratio, N, sizeof(double), cmp_dbl);
        double gb = 2.0 * (double)kv_bytes / 1e9;
        printf("|   from DRAM (%zu copies of K+V), median of %d: %.2f ms, K+V at %.1f GB/s; read-only floor %.1f GB/s; "
               "time / floor %.2f (paired median); cpu %.0f%% | | | | | | |\n", n_copies, N, t_attn[N / 2] * 1e3,
               gb / t_attn[N / 2], gb / t_read[N / 2], ratio[N / 2], 100.0 * cpu / (wall * n_threads));
    }
    oc_port_aligned_free(all);
    return ok;
}

static int bench_decode(oc_pool *pool, int n_threads, oc_isa isa, double peak) {
    const int n_kv = 16384, H = 12, Hkv = 2, d = 128;
    bench_bufs b;
    if (!bufs_alloc(&b, 1, n_kv, H, Hkv, d, n_threads)) {
        fprintf(stderr, "bench attention: out of memory\n");
        bufs_free(&b);
        return 0;
    }
    oc_attn_call a = call_for(1, n_kv, H, Hkv, d);
    a.q_offset = n_kv - 1;
    bench_result r;
    size_t kv_bytes = (size_t)2 * n_kv * Hkv * d;   /* K (or V) f16 */
    clock_t c0 = clock();
    uint64_t w0 = oc_port_now_ns();
    int ok = time_call(&a, isa, pool, &b, 1000, 2000, &r);
    /* the CPU share over the whole loop: a process CPU clock read right after a 2 ms call has not
     * yet counted the other threads' last slices */
    double cpu = (double)(clock() - c0) / CLOCKS_PER_SEC, wall = (double)(oc_port_now_ns() - w0) * 1e-9;
    if (ok) {
        r.cpu_ms = cpu / wall * r.ms;
        print_row("(c) decode, 16384 keys", "1 x 16384", &r, peak, n_threads);
        /* the same 16 MiB read-only, in cache as the attention's best repetition found it */
        double rd = 1e300;
        for (int i = 0; i < 20; i++) {
            oc_roofline_read_seconds(pool, b.k, kv_bytes);
            rd = fmin(rd, oc_roofline_read_seconds(pool, b.k, kv_bytes) + oc_roofline_read_seconds(pool, b.v, kv_bytes));
        }
        double gb = 2.0 * (double)kv_bytes / 1e9;
        printf("|   in cache (best of reps): K+V f16 at %.1f GB/s; read-only pass over them %.1f GB/s, time / floor %.2f | | | | | | |\n",
               gb / (r.ms * 1e-3), gb / rd, r.ms * 1e-3 / rd);
        ok = bench_decode_dram(pool, n_threads, isa, &b, &a, kv_bytes);
    }
    bufs_free(&b);
    return ok;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --cpu-time: case (c) on the calling thread (no pool), every time the thread's CPU time, so that a
 * machine shared with other work still gives the kernels' cost: the call in cache and from DRAM
 * (the next of the copies each time), a read-only pass over as many bytes, and the two floors of
 * one core: K+V bytes / that pass, and the call's FLOPs / the FMA peak of this thread. Decode
 * attention with 6 query heads per KV head does 6 FLOPs per byte of f16 K/V, so on a core whose
 * FMA rate is not far above 6 x its read bandwidth the FMA floor is the one that binds. */
static int bench_decode_cpu_time(oc_isa isa, oc_isa roof_isa) {
    const int n_kv = 16384, H = 12, Hkv = 2, d = 128;
    enum { N = 41 };
    bench_bufs b;
    size_t kv_bytes = (size_t)2 * n_kv * Hkv * d;
    size_t n_copies = DECODE_ROTATE_BYTES / (2 * kv_bytes);
    unsigned char *all = oc_port_aligned_alloc(OC_MEM_ALIGN, n_copies * 2 * kv_bytes);
    int ok = bufs_alloc(&b, 1, n_kv, H, Hkv, d, 1) && all;
    if (!ok) {
        fprintf(stderr, "bench attention: out of memory\n");
        bufs_free(&b);
        oc_port_aligned_free(all);
        return 0;
    }
    for (size_t c = 0; c < n_copies; c++) {
        memcpy(all + 2 * c * kv_bytes, b.k, kv_bytes);
        memcpy(all + (2 * c + 1) * kv_bytes, b.v, kv_bytes);
    }
    oc_attn_call a = call_for(1, n_kv, H, Hkv, d);
    a.q_offset = n_kv - 1;
    double t_cache[N], t_dram[N], t_read[N], flops = 0, fma = 0;
    oc_attn_stats st = { 0, 0, 0 };
    for (int r = 0; r < 3; r++) {
        double t0 = thread_cpu_s(), f = oc_roofline_fma_run(roof_isa, 20000000), s = thread_cpu_s() - t0;
        if (s > 0 && f / s > fma) fma = f / s;
    }
    for (int mode = 0; mode < 2 && ok; mode++)
        for (int r = 0; r < N + 4 && ok; r++) {
            size_t c = mode ? (size_t)r % n_copies : 0, other = ((size_t)r + n_copies / 2) % n_copies;
            oc_attn_host mem = { b.q, all + 2 * c * kv_bytes, all + (2 * c + 1) * kv_bytes, b.out };
            oc_error err;
            double t0 = thread_cpu_s();
            ok = oc_attn_run(&a, &mem, isa, NULL, b.scratch, b.scratch_bytes, mode == 0 && r == 0 ? &st : NULL, &err) == OC_OK;
            double t = thread_cpu_s() - t0;
            if (!ok) fprintf(stderr, "bench attention: %s\n", err.message);
            size_t i = (size_t)r - 4;   /* the first 4 calls warm up */
            if (r < 4 || i >= N) continue;
            if (mode) {
                t_dram[i] = t;
                t0 = thread_cpu_s();
                oc_roofline_read_seconds(NULL, all + 2 * other * kv_bytes, 2 * kv_bytes);
                t_read[i] = thread_cpu_s() - t0;
            } else {
                t_cache[i] = t;
            }
        }
    if (ok) {
        qsort(t_cache, N, sizeof(double), cmp_dbl);
        qsort(t_dram, N, sizeof(double), cmp_dbl);
        qsort(t_read, N, sizeof(double), cmp_dbl);
        flops = (double)st.flops_kept;
        double gb = 2.0 * (double)kv_bytes / 1e9, fma_s = flops / fma, floor_s = fmax(fma_s, t_read[N / 2]);
        printf("(c) decode, 16384 keys, one thread, thread CPU time, medians of %d calls:\n"
               "  FMA peak of this thread %.1f GFLOP/s; %.3f GFLOP per call: FMA floor %.3f ms\n"
               "  read-only pass over K+V from DRAM: %.3f ms (%.1f GB/s): bandwidth floor\n"
               "  in cache: %.3f ms (%.1f GFLOP/s, %.0f%% of the FMA peak)\n"
               "  from DRAM (the next of %zu copies each call): %.3f ms, K+V at %.1f GB/s; time / bandwidth floor %.2f, "
               "time / the larger floor %.2f\n",
               N, fma * 1e-9, flops * 1e-9, fma_s * 1e3, t_read[N / 2] * 1e3, gb / t_read[N / 2], t_cache[N / 2] * 1e3,
               flops / t_cache[N / 2] * 1e-9, 100.0 * flops / t_cache[N / 2] / fma, n_copies, t_dram[N / 2] * 1e3,
               gb / t_dram[N / 2], t_dram[N / 2] / t_read[N / 2], t_dram[N / 2] / floor_s);
    }
    bufs_free(&b);
    oc_port_aligned_free(all);
    return ok;
}

int bench_attention(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--backend") && strcmp(argv[i + 1], "cpu")) return bench_attention_cl(argc, argv);
    int n_threads = 0, quick = 0;
    const char *isa_name = NULL, *only = "abc";
    int n_images = 8, image_tokens = 1024, reps = 5, cpu_time = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) { if (!oc_tool_int_arg("bench attention", argv[i], argv[i + 1], 1, 1024, &n_threads)) return 2; i++; }
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa_name = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--images") && i + 1 < argc) { if (!oc_tool_int_arg("bench attention", argv[i], argv[i + 1], 1, 1024, &n_images)) return 2; i++; }
        else if (!strcmp(argv[i], "--image-tokens") && i + 1 < argc) { if (!oc_tool_int_arg("bench attention", argv[i], argv[i + 1], 1, 1048576, &image_tokens)) return 2; i++; }
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) { if (!oc_tool_int_arg("bench attention", argv[i], argv[i + 1], 1, 200, &reps)) return 2; i++; }
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) i++;   /* cpu */
        else if (!strcmp(argv[i], "--cpu-time")) cpu_time = 1;
        else if (strcmp(argv[i], "-h") && strcmp(argv[i], "--help")) {
            fprintf(stderr, "ocellus bench attention: %s '%s' (ocellus bench attention --help lists the options)\n",
                    !strcmp(argv[i], "--device") ? "--device picks an OpenCL device: give --backend opencl; got"
                                                 : "unknown option or missing value", argv[i]);
            return 2;
        } else {
            fprintf(stdout, "usage: ocellus bench attention [-t N] [--quick] [--isa scalar|avx2|avx512|neon]\n"
                            "       ocellus bench attention --backend opencl [--device N|NAME] [--quick] ...\n"
                            "  -t N     threads (default: all CPUs)\n"
                            "  --quick  skip the 16 x 2048 image prompt (33K tokens)\n"
                            "  --only LETTERS  run only some of the cases a, b, c, d (e.g. --only b; d, the\n"
                            "           MMInference patterns at 8K/33K/66K tokens, runs only when named)\n"
                            "  --images N --image-tokens M  the first decoder prompt (default 8 x 1024)\n"
                            "  --reps N  best of up to N runs per case (default 5; long cases stop after 2 s)\n"
                            "  --cpu-time  only case (c), on one thread timed by its CPU time, against the\n"
                            "           bandwidth and the FMA floor of that thread (for shared machines)\n");
            return 0;
        }
    }
    if (!only[0] || strspn(only, "abcd") != strlen(only)) {
        fprintf(stderr, "ocellus bench attention: --only wants letters of the cases a, b, c, d, not '%s'\n", only);
        return 2;
    }
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_isa isa = oc_isa_best(&cpu);
    if (isa_name) {
        int found = 0;
        for (int k = 0; k < OC_ISA_COUNT; k++)
            if (!strcmp(isa_name, oc_isa_name((oc_isa)k)) && oc_isa_runs((oc_isa)k, &cpu)) { isa = (oc_isa)k; found = 1; }
        if (!found) { fprintf(stderr, "bench attention: ISA '%s' does not run here\n", isa_name); return 2; }
    }
    if (cpu_time) {
        printf("attention bench: cpu %s, kernels %s, K/V f16\n", cpu.vendor, oc_attn_kernels_name(isa));
        return bench_decode_cpu_time(isa, oc_isa_best(&cpu)) ? 0 : 1;
    }
    oc_pool *pool = NULL;
    oc_error err;
    if (oc_pool_open(&pool, n_threads, NULL, &err) != OC_OK) { fprintf(stderr, "bench attention: %s\n", err.message); return 1; }
    n_threads = oc_pool_n_threads(pool);
    /* The peak on the best ISA of this CPU (the roof), whatever --isa picks for the kernels. */
    oc_isa roof_isa = oc_isa_best(&cpu);
    /* Measured twice: the first run also wakes the pool's threads and the cores' clocks. */
    double peak = oc_roofline_fma_gflops(pool, roof_isa);
    peak = fmax(peak, oc_roofline_fma_gflops(pool, roof_isa));
    printf("attention bench: cpu %s, %d threads, kernels %s, K/V f16\n", cpu.vendor, n_threads, oc_attn_kernels_name(isa));
    printf("FP32 FMA peak (%s FMA loop, %d chains/thread): %.1f GFLOP/s\n\n", oc_isa_name(roof_isa),
           OC_ROOFLINE_CHAINS, peak);
    printf("| %-36s | %-13s | %9s | %8s | %7s | %5s | %5s |\n", "case", "n_q x n_kv", "time ms", "GFLOP", "GFLOP/s",
           "peak", "cpu");
    printf("|--------------------------------------|---------------|-----------|----------|---------|-------|-------|\n");
    int ok = 1;
    if (n_images < 0 || n_images > 40 || image_tokens < 1 || reps < 1) {
        fprintf(stderr, "bench attention: need 0..40 images of >= 1 token and reps >= 1\n");
        oc_pool_close(pool);
        return 2;
    }
    if (strchr(only, 'a')) ok = bench_decoder(pool, n_threads, isa, n_images, image_tokens, peak, reps);
    if (ok && strchr(only, 'a') && !quick) ok = bench_decoder(pool, n_threads, isa, 16, 2048, peak, reps);
    if (ok && strchr(only, 'b')) ok = bench_vision(pool, n_threads, isa, peak, reps, 4096, 80, "(b) vision 4096 patches, full", 0);
    if (ok && strchr(only, 'b'))   /* ggml runs head dims that are not a multiple of 16 on a scalar path */
        ok = bench_vision(pool, n_threads, isa, peak, reps, 1024, 72, "(b) head dim 72, 1024 patches", 0);
    /* The vision encoder's calls on F16 / quantized weights: bf16 products where the CPU takes them
     * (attn.c: AVX512_BF16 and bf16_fast), next to the f32 rows of the same shapes in this run. */
    if (ok && strchr(only, 'b') && isa == OC_ISA_AVX512 && cpu.avx512bf16 && cpu.bf16_fast) {
        ok = bench_vision(pool, n_threads, isa, peak, reps, 4096, 80, "(b) 4096 patches, bf16 products", 1);
        if (ok) ok = bench_vision(pool, n_threads, isa, peak, reps, 1024, 80, "(b) 1024 patches (448px), f32", 0);
        if (ok) ok = bench_vision(pool, n_threads, isa, peak, reps, 1024, 80, "(b) 1024 patches, bf16 products", 1);
    }
    if (ok && strchr(only, 'c')) ok = bench_decode(pool, n_threads, isa, peak);
    if (ok && strchr(only, 'd')) ok = bench_mminf(pool, n_threads, isa, quick, reps);
    double peak_end = oc_roofline_fma_gflops(pool, roof_isa);
    printf("\nFMA peak measured again after the cases: %.1f GFLOP/s (fractions above use %.1f)\n", peak_end, peak);
    oc_pool_close(pool);
    return ok ? 0 : 1;
}
