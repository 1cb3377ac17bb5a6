/* roofline.c: the FP32 FMA and BF16 peaks and the copy and read-only bandwidth measurements
 * (roofline.h): the pool and timing logic; the loops themselves live in roofline_<isa>.c. */
#include "tools/roofline.h"

#include "core/isa_built.h"

#include <string.h>

#define COPY_BYTES ((size_t)256 << 20)   /* per buffer: 8x the 32 MiB L3 of the reference machines */
#define COPY_CHUNK ((size_t)1 << 20)
#define REPS 3

/* portable FMA loop: a*b+c in C (two operations unless the compiler contracts them) */
static float fma_scalar(int64_t n_iter, int *lanes) {
    /* chains written out, as in roofline_avx2.c */
    const float m = 0.999f, a = 1e-3f;
    float c0 = 0, c1 = 1, c2 = 2, c3 = 3, c4 = 4, c5 = 5, c6 = 6, c7 = 7, c8 = 8, c9 = 9, c10 = 10, c11 = 11;
    for (int64_t i = 0; i < n_iter; i++) {
        c0 = c0 * m + a; c1 = c1 * m + a; c2 = c2 * m + a; c3 = c3 * m + a; c4 = c4 * m + a; c5 = c5 * m + a;
        c6 = c6 * m + a; c7 = c7 * m + a; c8 = c8 * m + a; c9 = c9 * m + a; c10 = c10 * m + a; c11 = c11 * m + a;
    }
    *lanes = 1;
    return c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
}

typedef float (*fma_loop_fn)(int64_t n_iter, int *lanes);

static fma_loop_fn fma_loop_for(oc_isa isa) {
    switch (isa) {
    case OC_ISA_SCALAR: return fma_scalar;
#if OC_BUILT_AVX2
    case OC_ISA_AVX2: return oc_roofline_fma_avx2;
#endif
#if OC_BUILT_AVX512
    case OC_ISA_AVX512: return oc_roofline_fma_avx512;
#endif
#if OC_BUILT_NEON
    case OC_ISA_NEON: return oc_roofline_fma_neon;
#endif
    default: return NULL;
    }
}

#define MAX_TASKS 1024   /* oc_pool_open's thread limit */

typedef struct fma_job {
    fma_loop_fn fn;
    int64_t n_iter;
    float sink[MAX_TASKS];   /* one result per task keeps every loop alive */
    int lanes[MAX_TASKS];
} fma_job;

static void fma_task(void *arg, int64_t task, int thread) {
    (void)thread;
    fma_job *j = arg;
    j->sink[task] = j->fn(j->n_iter, &j->lanes[task]);
}

static double seconds_of(oc_pool *pool, int64_t n_tasks, oc_task_fn fn, void *arg) {
    uint64_t t0 = oc_port_now_ns();
    oc_pool_run(pool, n_tasks, fn, arg);
    return (double)(oc_port_now_ns() - t0) * 1e-9;
}

static double loop_gflops(oc_pool *pool, fma_loop_fn fn, double flops_per_lane);

double oc_roofline_fma_gflops(oc_pool *pool, oc_isa isa) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    fma_loop_fn fn = fma_loop_for(isa);
    if (!fn || !oc_isa_runs(isa, &cpu)) return 0;
    return loop_gflops(pool, fn, 2.0);
}

double oc_roofline_bf16_gflops(oc_pool *pool) {
#if OC_BUILT_AVX512
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    if (oc_isa_runs(OC_ISA_AVX512, &cpu) && cpu.avx512bf16) return loop_gflops(pool, oc_roofline_bf16_avx512, 4.0);
#endif
    (void)pool;
    return 0;
}

/* flops_per_lane: per chain step and f32 lane (an FMA 2; a BF16 pair dot product 4) */
static double loop_gflops(oc_pool *pool, fma_loop_fn fn, double flops_per_lane) {
    int n_threads = oc_pool_n_threads(pool);
    /* one task per thread, each long enough (~0.2 s) that every thread takes exactly one */
    static const fma_job zero;
    fma_job j = zero;
    j.fn = fn;
    j.n_iter = 100000;
    double t = seconds_of(NULL, 1, fma_task, &j);
    if (t > 0) j.n_iter = (int64_t)((double)j.n_iter * 0.2 / t) + 1;
    double best = 0;
    for (int r = 0; r < REPS; r++) {
        t = seconds_of(pool, n_threads, fma_task, &j);
        double flops = flops_per_lane * OC_ROOFLINE_CHAINS * (double)j.lanes[0] * (double)j.n_iter * n_threads;
        if (t > 0 && flops / t > best) best = flops / t;
    }
    return best * 1e-9;
}

double oc_roofline_fma_run(oc_isa isa, int64_t n_iter) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    fma_loop_fn fn = fma_loop_for(isa);
    if (!fn || !oc_isa_runs(isa, &cpu)) return 0;
    int lanes;
    volatile float sink = fn(n_iter, &lanes);
    (void)sink;
    return 2.0 * OC_ROOFLINE_CHAINS * (double)lanes * (double)n_iter;
}

typedef struct copy_job {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes, piece_bytes;
} copy_job;

static void copy_task(void *arg, int64_t task, int thread) {
    (void)thread;
    copy_job *j = arg;
    size_t at = (size_t)task * j->piece_bytes, n = j->bytes - at < j->piece_bytes ? j->bytes - at : j->piece_bytes;
    memcpy(j->dst + at, j->src + at, n);
}

double oc_roofline_copy_seconds(oc_pool *pool, void *dst, const void *src, size_t bytes) {
    /* 4 pieces per thread balance the threads, pieces of 1 MiB or less keep a piece's source and
     * destination pages in the TLB; whole 4 KiB pages */
    size_t piece = bytes / (4 * (size_t)oc_pool_n_threads(pool)) + 1;
    piece = (piece + 4095) / 4096 * 4096;
    if (piece > COPY_CHUNK) piece = COPY_CHUNK;
    copy_job j = { dst, src, bytes, piece };
    return seconds_of(pool, (int64_t)((bytes + piece - 1) / piece), copy_task, &j);
}

double oc_roofline_copy_gbps(oc_pool *pool, const oc_allocator *alloc) {
    unsigned char *a = oc_mem_alloc(alloc, COPY_BYTES), *b = oc_mem_alloc(alloc, COPY_BYTES);
    double best = 0;
    if (a && b) {
        memset(a, 1, COPY_BYTES);   /* fault the pages in before timing */
        memset(b, 2, COPY_BYTES);
        for (int r = 0; r < REPS; r++) {
            double t = oc_roofline_copy_seconds(pool, b, a, COPY_BYTES);
            if (t > 0 && 2.0 * (double)COPY_BYTES / t > best) best = 2.0 * (double)COPY_BYTES / t;
        }
    }
    oc_mem_free(alloc, a, COPY_BYTES);
    oc_mem_free(alloc, b, COPY_BYTES);
    return best * 1e-9;
}

/* ---- read-only bandwidth ---------------------------------------------------------------------- */

typedef uint64_t (*read_fn)(const void *p, size_t n);

static uint64_t read_portable(const void *p, size_t n) {
    const uint64_t *v = p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) { a0 ^= v[i]; a1 ^= v[i + 1]; a2 ^= v[i + 2]; a3 ^= v[i + 3]; }
    return a0 ^ a1 ^ a2 ^ a3;
}

static read_fn read_loop(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
#if OC_BUILT_AVX512
    if (oc_isa_runs(OC_ISA_AVX512, &cpu)) return oc_roofline_read_avx512;
#endif
#if OC_BUILT_AVX2
    if (oc_isa_runs(OC_ISA_AVX2, &cpu)) return oc_roofline_read_avx2;
#endif
    return read_portable;
}

typedef struct read_job {
    read_fn fn;
    const unsigned char *src;
    size_t bytes, piece_bytes;
    uint64_t sink[MAX_TASKS];
} read_job;

static void read_task(void *arg, int64_t task, int thread) {
    read_job *j = arg;
    size_t at = (size_t)task * j->piece_bytes, n = j->bytes - at < j->piece_bytes ? j->bytes - at : j->piece_bytes;
    j->sink[thread % MAX_TASKS] ^= j->fn(j->src + at, n & ~(size_t)63);
}

double oc_roofline_read_seconds(oc_pool *pool, const void *src, size_t bytes) {
    size_t piece = bytes / (4 * (size_t)oc_pool_n_threads(pool)) + 1;   /* as the copy */
    piece = (piece + 4095) / 4096 * 4096;
    if (piece > COPY_CHUNK) piece = COPY_CHUNK;
    read_job j;
    memset(&j, 0, sizeof j);
    j.fn = read_loop();
    j.src = src;
    j.bytes = bytes;
    j.piece_bytes = piece;
    double t = seconds_of(pool, (int64_t)((bytes + piece - 1) / piece), read_task, &j);
    volatile uint64_t keep = j.sink[0];   /* the reduction is used: the loads stay */
    (void)keep;
    return t;
}

double oc_roofline_read_gbps(oc_pool *pool, const oc_allocator *alloc) {
    unsigned char *a = oc_mem_alloc(alloc, 2 * COPY_BYTES);
    double best = 0;
    if (a) {
        memset(a, 1, 2 * COPY_BYTES);   /* fault the pages in before timing */
        for (int r = 0; r < REPS; r++) {
            double t = oc_roofline_read_seconds(pool, a, 2 * COPY_BYTES);
            if (t > 0 && 2.0 * (double)COPY_BYTES / t > best) best = 2.0 * (double)COPY_BYTES / t;
        }
    }
    oc_mem_free(alloc, a, 2 * COPY_BYTES);
    return best * 1e-9;
}
