/* roofline.h: this machine's physical limits, measured, for benchmarks to report fractions of:
 * the FP32 FMA peak (all pool threads at once, enough independent accumulator chains to cover the
 * FMA latency) and the memory copy bandwidth (buffers far larger than the last-level cache).
 * Both take a fraction of a second to a few seconds; benchmarks call them, tests do not. */
#ifndef OC_ROOFLINE_H
#define OC_ROOFLINE_H

#include "core/isa.h"
#include "core/pool.h"

/* GFLOP/s (an FMA counts 2) of FMA chains on isa's widest vectors, run on every pool thread
 * (pool NULL: the calling thread); best of a few repetitions. 0 when isa does not run here. */
double oc_roofline_fma_gflops(oc_pool *pool, oc_isa isa);

/* GB/s of a parallel memcpy over two 256 MiB buffers in 1 MiB pieces, counting bytes read plus bytes
 * written (as STREAM's copy does; libc copies pieces this size with ordinary stores, so the hardware
 * also reads each destination line first); best of a few repetitions. 0 when the buffers cannot be
 * allocated. */
double oc_roofline_copy_gbps(oc_pool *pool, const oc_allocator *alloc);

/* Seconds one parallel memcpy of `bytes` from src to dst takes on the pool (NULL: the calling thread),
 * in pieces as above: for a benchmark that pairs a kernel's time with a copy of the same traffic,
 * measured the moment before or after, on a machine whose bandwidth moves. */
double oc_roofline_copy_seconds(oc_pool *pool, void *dst, const void *src, size_t bytes);

/* GFLOP/s of BF16 dot products (vdpbf16ps: 2 multiply-adds per f32 lane, counted as 4 flops),
 * all pool threads, as oc_roofline_fma_gflops; 0 when this build or CPU has none (AVX512_BF16). */
double oc_roofline_bf16_gflops(oc_pool *pool);

/* GB/s of reading two 256 MiB buffers with wide loads into a reduction that writes nothing back
 * (the floor of a kernel that only streams its operand in, like a decode GEMV: a memcpy floor
 * also pays for the writes and the reads of the destination lines); best of a few repetitions,
 * all pool threads. 0 when the buffers cannot be allocated. */
double oc_roofline_read_gbps(oc_pool *pool, const oc_allocator *alloc);

/* Seconds one parallel read-only pass over `bytes` at src takes (pieces as for the copy). */
double oc_roofline_read_seconds(oc_pool *pool, const void *src, size_t bytes);

/* Runs isa's FMA loop on the calling thread (for callers that time it with their own clock): returns
 * the flops done, 0 when isa does not run here. */
double oc_roofline_fma_run(oc_isa isa, int64_t n_iter);

/* Per-ISA FMA loops (roofline_<isa>.c): n_iter iterations of OC_ROOFLINE_CHAINS independent FMAs on
 * one vector each; return a value that depends on every chain (so nothing is optimized away) and
 * write the vector width in floats to *lanes. */
#define OC_ROOFLINE_CHAINS 12
float oc_roofline_fma_avx2(int64_t n_iter, int *lanes);
float oc_roofline_fma_avx512(int64_t n_iter, int *lanes);
float oc_roofline_fma_neon(int64_t n_iter, int *lanes);
/* The BF16 loop (roofline_avx512.c; lanes: f32 lanes, each 2 products per instruction). */
float oc_roofline_bf16_avx512(int64_t n_iter, int *lanes);
/* Read-only reductions over n bytes (a multiple of 64, 64-byte aligned): return a value that
 * depends on every byte. */
uint64_t oc_roofline_read_avx512(const void *p, size_t n);
uint64_t oc_roofline_read_avx2(const void *p, size_t n);

#endif
