/* matmul.h: Y = X W^T for a GGUF weight W against f32 activations X: the GEMM of prefill and the
 * GEMV of decode, for F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K weights, on the ISA path the caller
 * chooses (scalar, AVX2, AVX-512, NEON).
 *
 *   W: GGUF ne = [n_in, n_out]: n_out rows (output neurons) of n_in elements, quantized along n_in.
 *   X: f32 [n_tok x n_in], row stride x_stride floats.     Y: f32 [n_tok x n_out], row stride y_stride.
 *   Y[t][o] = sum_i W[o][i] * X[t][i]  (+ bias[o] when bias != NULL)
 *
 * Results are bitwise identical for any number of pool threads: every output element is computed by
 * exactly one task, with a reduction order that depends only on the shapes. They differ between ISA
 * paths (different summation orders; the int8 paths also round X to 8 bits per block of 32, the
 * BF16 path rounds W and X to bf16). */
#ifndef OC_MATMUL_H
#define OC_MATMUL_H

#include "core/core.h"
#include "core/isa.h"
#include "core/pool.h"

typedef struct oc_weight {
    int32_t dtype;        /* oc_dtype: F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K */
    int64_t n_in;         /* GGUF ne[0]: elements per row; a multiple of the type's block */
    int64_t n_out;        /* GGUF ne[1]: rows */
    const void *data;     /* n_out rows, row_bytes apart */
    size_t row_bytes;     /* >= oc_dtype_row_bytes(dtype, n_in) */
} oc_weight;

/* The kernels of one ISA (opaque; defined in matmul_kern.h). */
typedef struct oc_matmul_kernels oc_matmul_kernels;

/* The table for isa, or NULL when it was not built into this library or this CPU cannot run it.
 * [alloc: no] */
const oc_matmul_kernels *oc_matmul_kernels_for(oc_isa isa);
oc_isa oc_matmul_kernels_isa(const oc_matmul_kernels *k);
/* e.g. "avx512+vnni": the ISA and the optional extensions this table uses. */
const char *oc_matmul_kernels_name(const oc_matmul_kernels *k);
/* The table's BF16 path: 0 none, 1 only when OC_MATMUL_BF16 forces it, 2 OC_MATMUL_AUTO takes it. */
int oc_matmul_kernels_bf16(const oc_matmul_kernels *k);

/* How products with quantized weights are computed. AUTO takes, per ISA, whichever was measured
 * faster (BENCHMARKS.md "matmul"); the other two force a path (tests, benchmarks). The int8 path
 * exists for Q8_0 and Q4_0 (GEMM and GEMV) and for Q4_K and Q6_K (GEMV only) where the ISA table
 * has those kernels; everything else always takes the float path. */
typedef enum oc_matmul_path {
    OC_MATMUL_AUTO = 0,
    OC_MATMUL_FLOAT,      /* dequantize W to f32, f32 FMA */
    OC_MATMUL_INT8,       /* quantize X to 8-bit blocks of 32 once per call, integer dot products */
    OC_MATMUL_BF16        /* GEMMs of F16 / BF16 weights (n_in even) on the BF16 path where the table
                             has one (W and X rounded to bf16 per tile, f32 sums); the rest as AUTO */
} oc_matmul_path;

typedef struct oc_matmul_ctx oc_matmul_ctx;

/* The scratch block of a context for these limits (pool threads, n_in, n_tok); 0 on overflow. */
size_t oc_matmul_scratch_bytes(const oc_matmul_kernels *k, int n_threads, int64_t max_n_in,
                               int64_t max_n_tok);
/* Everything oc_matmul_ctx_open takes from its allocator: the context and its scratch, each with
 * oc_mem_alloc's header; 0 on overflow. */
size_t oc_matmul_ctx_bytes(const oc_matmul_kernels *k, int n_threads, int64_t max_n_in, int64_t max_n_tok);

/* A context: the kernel table, the pool (borrowed, may be NULL: serial) and all scratch, sized for
 * calls with n_in <= max_n_in and n_tok <= max_n_tok. oc_matmul never allocates.
 * [alloc: yes, once] [errors: OC_ERR_INVALID, OC_ERR_NOMEM] */
oc_status oc_matmul_ctx_open(oc_matmul_ctx **out, const oc_matmul_kernels *k, oc_pool *pool,
                             int64_t max_n_in, int64_t max_n_tok, const oc_allocator *alloc,
                             oc_error *err);
void oc_matmul_ctx_close(oc_matmul_ctx *ctx);
void oc_matmul_ctx_set_path(oc_matmul_ctx *ctx, oc_matmul_path path);

/* 1 when oc_matmul(ctx, w, ..., n_tok) takes the BF16 path: a GEMM of an F16 or BF16 weight with
 * an even n_in, on a table with BF16 kernels, where the path is OC_MATMUL_BF16 or AUTO and the
 * table's BF16 dot products were measured faster than its FP32 FMA (oc_cpu_features.bf16_fast).
 * Both operands are rounded to bf16 (8 significant bits; F16 -> bf16 drops 3 mantissa bits), the
 * products summed in f32: |y - y_exact| <= (2^-7 + 2^-16) sum |w x| + the f32 summation bound. */
int oc_matmul_uses_bf16(const oc_matmul_ctx *ctx, const oc_weight *w, int64_t n_tok);

/* 1 when oc_matmul(ctx, w, ..., n_tok) takes the int8 path (quantizing X), 0 for the float path. */
int oc_matmul_uses_int8(const oc_matmul_ctx *ctx, const oc_weight *w, int64_t n_tok);

/* Y = X W^T (+ bias). Every Y[t][o] with t < n_tok, o < n_out is written; nothing else is read or
 * written (no reads past the last row of W or X). Not reentrant on one ctx.
 * [alloc: no] [errors: OC_ERR_INVALID (shapes, strides, NULL), OC_ERR_UNSUPPORTED (dtype),
 *  OC_ERR_RANGE (n_in or n_tok above the ctx limits)] */
oc_status oc_matmul(oc_matmul_ctx *ctx, const oc_weight *w, const float *x, size_t x_stride,
                    float *y, size_t y_stride, int64_t n_tok, const float *bias, oc_error *err);

#endif
