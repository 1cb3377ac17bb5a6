/* bench_mminf.c: case (d) of `ocellus bench attention --only d`: MMInference's dynamic patterns
 * against dense attention on the Qwen2-VL-2B decoder layer (12 q / 2 kv heads, d 128, causal, K/V
 * f16) at 8 x 1024 + 100, 32 x 1024 + 100 and 32 x 2048 + 100 tokens (--quick: the first only).
 * Every head runs the same pattern: dense; Vertical-Slash (1000, 1024), the smallest of
 * mminference.txt Table 3; Grid (stride auto up to 1024, h+v+s lines), Table 3's search space.
 * The sparse times include building the index (oc_attn_dyn_build: the estimate from the last 64
 * queries, top-k or the stride search), and their FLOPs include the estimate's (64 rows x 2d per
 * key, over every key and again over the keys the pattern reads); "kept" alone is shown too. Runs
 * alternate dense, VS, Grid; medians.
 *
 * Random Q/K would give an index with nothing to find, so the data has the structure the patterns
 * are for (synthetic, documented here): a RoPE-like positional part (pairs of dims rotating with
 * periods 61 .. 9000 tokens, so scores fall off with distance: slash lines near the diagonal),
 * keys that open every 32-token row of an image patch grid marked in one dim that every query
 * reads (vertical lines every 32 keys), 4 attention-sink keys, and uniform noise elsewhere. */
#include "attention/attn.h"
#include "bench.h"
#include "core/f16.h"
#include "core/pool.h"
#include "port.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_PERIODS 7          /* positional pairs, dims 0..13 */
#define MARK_DIM 14          /* the row-start mark */
#define SINK_DIM 15
#define ROW_TOKENS 32        /* tokens per patch row of the synthetic image */
#define MAX_REPS 9

typedef struct mm_bufs {
    float *q, *out;
    uint16_t *k, *v;
    void *scratch, *dyn_mem;
    size_t scratch_bytes, dyn_bytes;
} mm_bufs;

static float unit_noise(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffff) / 32768.0f - 1.0f;
}

/* Pair m rotates with period 61 * 2.3^m tokens: geometric like RoPE's low frequencies, and
 * incommensurate, so the positional part has no grid of its own (periods 256 * 2^m would make
 * every multiple of 1024 a line). */
static double pos_freq(int m) { return 2.0 * 3.14159265358979 / (61.0 * pow(2.3, m)); }

static int mm_alloc(mm_bufs *b, int n, int H, int Hkv, int d, int n_threads) {
    memset(b, 0, sizeof *b);
    b->q = malloc(sizeof(float) * (size_t)n * H * d);
    b->out = malloc(sizeof(float) * (size_t)n * H * d);
    b->k = malloc(2 * (size_t)n * Hkv * d);
    b->v = malloc(2 * (size_t)n * Hkv * d);
    oc_attn_dims dims = { n, n, H, Hkv, d };
    b->scratch_bytes = oc_attn_scratch_bytes(&dims, n_threads);
    b->dyn_bytes = oc_attn_dyn_bytes(&dims, n_threads);
    b->scratch = oc_port_aligned_alloc(OC_MEM_ALIGN, b->scratch_bytes);
    b->dyn_mem = oc_port_aligned_alloc(OC_MEM_ALIGN, b->dyn_bytes);
    if (!b->q || !b->out || !b->k || !b->v || !b->scratch || !b->dyn_mem) return 0;
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    /* positional pairs: q . k = sum_m A^2 cos(w_m (i - j)); A^2 * 7 / sqrt(128) ~ 9 at i = j */
    const float amp = 3.4f;
    for (int i = 0; i < n; i++) {
        for (int h = 0; h < H; h++) {
            float *q = b->q + ((size_t)i * H + h) * d;
            for (int e = 0; e < d; e++) q[e] = 0.5f * unit_noise(&s);
            for (int m = 0; m < N_PERIODS; m++) {
                double w = pos_freq(m);
                q[2 * m] = amp * (float)cos(w * i);
                q[2 * m + 1] = amp * (float)sin(w * i);
            }
            q[MARK_DIM] = 8.0f;   /* with the marks below: +2.8 and +4.2 in the logits */
            q[SINK_DIM] = 8.0f;
        }
        for (int g = 0; g < Hkv; g++) {
            uint16_t *k = b->k + ((size_t)i * Hkv + g) * d, *v = b->v + ((size_t)i * Hkv + g) * d;
            for (int e = 0; e < d; e++) {
                float x = 0.5f * unit_noise(&s);
                if (e < 2 * N_PERIODS) {
                    double w = pos_freq(e / 2);
                    x = amp * (float)(e % 2 ? sin(w * i) : cos(w * i));
                }
                if (e == MARK_DIM) x = i % ROW_TOKENS == 0 ? 4.0f : 0.0f;
                if (e == SINK_DIM) x = i < 4 ? 6.0f : 0.0f;
                k[e] = oc_f32_to_f16(x);
                v[e] = oc_f32_to_f16(unit_noise(&s));
            }
        }
    }
    return 1;
}

static void mm_free(mm_bufs *b) {
    free(b->q); free(b->out); free(b->k); free(b->v);
    oc_port_aligned_free(b->scratch);
    oc_port_aligned_free(b->dyn_mem);
}

typedef struct mm_run { double ms, build_ms, cpu_ms; oc_attn_stats st; } mm_run;   /* cpu: all threads */

/* One call: build the index when a pattern needs one, then run. */
static int mm_time(oc_attn_call a, const oc_attn_host *mem, oc_isa isa, oc_pool *pool, mm_bufs *b, mm_run *r) {
    oc_error err;
    memset(r, 0, sizeof *r);
    uint64_t t0 = oc_port_now_ns();
    clock_t c0 = clock();
    if (a.patterns && oc_pattern_is_dynamic(a.patterns[0].kind)) {
        const oc_attn_dyn *dyn;
        if (oc_attn_dyn_build(&a, mem, isa, pool, b->dyn_mem, b->dyn_bytes, &dyn, &err) != OC_OK) {
            fprintf(stderr, "bench attention: %s\n", err.message);
            return 0;
        }
        a.dyn = dyn;
    }
    uint64_t t1 = oc_port_now_ns();
    if (oc_attn_run(&a, mem, isa, pool, b->scratch, b->scratch_bytes, &r->st, &err) != OC_OK) {
        fprintf(stderr, "bench attention: %s\n", err.message);
        return 0;
    }
    r->ms = (double)(oc_port_now_ns() - t0) * 1e-6;
    r->cpu_ms = (double)(clock() - c0) * 1000.0 / CLOCKS_PER_SEC;
    r->build_ms = (double)(t1 - t0) * 1e-6;
    return 1;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int bench_one(oc_pool *pool, int n_threads, oc_isa isa, int n_images, int image_tokens, int reps) {
    const int H = 12, Hkv = 2, d = 128;
    int n = n_images * image_tokens + 100;   /* the token count of bench_decoder_layout's prompt */
    mm_bufs b;
    if (!mm_alloc(&b, n, H, Hkv, d, n_threads)) {
        fprintf(stderr, "bench attention: out of memory\n");
        mm_free(&b);
        return 0;
    }
    oc_head_pattern pat[3][12];
    memset(pat, 0, sizeof pat);
    for (int h = 0; h < H; h++) {
        pat[1][h].kind = OC_PATTERN_VERTICAL_SLASH;
        pat[1][h].n_vertical = 1000;
        pat[1][h].n_slash = 1024;
        pat[2][h].kind = OC_PATTERN_GRID;
        pat[2][h].grid_max_stride = 1024;
        pat[2][h].grid_lines = OC_GRID_HLINE | OC_GRID_VLINE | OC_GRID_SLASH;
    }
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = a.n_kv = n; a.n_head = H; a.n_head_kv = Hkv; a.head_dim = d;
    a.q_stride_token = (int64_t)H * d; a.q_stride_head = d;
    a.kv_dtype = OC_DTYPE_F16;
    a.k_stride_token = a.v_stride_token = (int64_t)Hkv * d;
    a.k_stride_head = a.v_stride_head = d;
    a.out_stride_token = (int64_t)H * d; a.out_stride_head = d;
    a.scale = 1.0f / sqrtf((float)d);
    a.mask = OC_ATTN_CAUSAL;
    oc_attn_host mem = { b.q, b.k, b.v, b.out };
    double ms[3][MAX_REPS], build[3][MAX_REPS], cpu[3][MAX_REPS];
    mm_run last[3];
    int ok = 1;
    for (int rep = 0; ok && rep < reps; rep++)
        for (int p = 0; ok && p < 3; p++) {
            a.patterns = p ? pat[p] : NULL;
            ok = mm_time(a, &mem, isa, pool, &b, &last[p]);
            ms[p][rep] = last[p].ms;
            build[p][rep] = last[p].build_ms;
            cpu[p][rep] = last[p].cpu_ms;
        }
    if (ok) {
        static const char *const names[3] = { "dense", "vertical-slash(1000,1024)", "grid(auto,h+v+s,1024)" };
        double dense_ms = median(ms[0], reps), dense_cpu = median(cpu[0], reps);
        double dense_flops = (double)last[0].st.flops_kept;
        /* the estimate: Q K^T (2d per pair) of 64 rows over every key (pass 1) and again over the
         * keys whose scores the pattern reads (pass 2: all for VS, the search's view for Grid) */
        int32_t v0, v1;
        oc_dyn_grid_view(n, 0, 1024, &v0, &v1);
        double est_flops[3] = { 0, 2.0 * n * 64 * 2 * d * H, ((double)n + (v1 - v0)) * 64 * 2 * d * H };
        for (int p = 0; p < 3; p++) {
            double t = median(ms[p], reps), tb = median(build[p], reps), c = median(cpu[p], reps);
            double kept = (double)last[p].st.flops_kept, flops = kept + est_flops[p];
            double time_ratio = t / dense_ms, flop_ratio = flops / dense_flops;
            printf("| (d) %dx%d+100 %-26s | %6d | %9.1f | %7.1f | %8.4f | %8.4f | %6.3f | %6.2f | %6.2f | %5.2fx | %5.2f |\n",
                   n_images, image_tokens, names[p], n, t, tb, kept / dense_flops, flop_ratio, time_ratio,
                   time_ratio / flop_ratio, c / dense_cpu / flop_ratio, dense_ms / t,
                   (double)last[p].st.flops_executed / kept);
        }
    }
    mm_free(&b);
    return ok;
}

int bench_mminf(oc_pool *pool, int n_threads, oc_isa isa, int quick, int reps) {
    if (reps > MAX_REPS) reps = MAX_REPS;
    printf("\n(d) MMInference patterns, every head the same pattern; times are medians of %d runs, index build "
           "included\n", reps);
    printf("| %-38s | %6s | %9s | %7s | %8s | %8s | %6s | %6s | %6s | %6s | %5s |\n", "case", "tokens", "time ms",
           "index", "kept/den", "FLOP rat", "t rat", "t/FLOP", "c/FLOP", "speed", "exec");
    printf("|----------------------------------------|--------|-----------|---------|----------|----------|--------|"
           "--------|--------|--------|-------|\n");
    static const int shapes[3][2] = { { 8, 1024 }, { 32, 1024 }, { 32, 2048 } };
    int ok = 1;
    for (int s = 0; ok && s < (quick ? 1 : 3); s++) ok = bench_one(pool, n_threads, isa, shapes[s][0], shapes[s][1], reps);
    printf("kept/den: the pattern's kept FLOPs over dense; FLOP rat adds the estimate's FLOPs; t rat: time over "
           "dense; t/FLOP: t rat / FLOP rat (target <= 1.2); c/FLOP: the same in process CPU time "
           "(the share of the cores the run got cancels: the ratio to read on a loaded machine); speed: dense time / this time; exec: pairs run\n"
           "through the kernels over pairs kept (masked lanes of partial tiles)\n");
    return ok;
}
