/* attn_kernels.h: the micro-kernels behind the attention engine, one table per ISA
 * (attn_ref.c scalar, attn_avx2.c, attn_avx512.c, attn_neon.c). attn.c owns all control flow
 * (tiles, masks, online softmax bookkeeping, threads); a table only holds the inner loops.
 *
 * Packed "B" operands. Both GEMMs of a tile, S = Q K^T and O += P V, multiply a row-major A
 * (broadcast one element at a time) by a B of n columns that the pack functions store in column
 * panels: panel p holds columns [p*panel, p*panel + panel) as k rows of `panel` floats, panels one
 * after another (offset p * k * panel). When n % panel != 0 the last panel is `vec` wide. n is
 * always a multiple of vec. Zero-filled padding makes every panel full, so the kernels need no
 * column remainder code, and any head dim runs the vector path (ggml's tiled path requires
 * DV % simd width == 0 and falls back to a scalar loop otherwise). */
#ifndef OC_ATTN_KERNELS_H
#define OC_ATTN_KERNELS_H

#include "core.h"
#include "isa.h"

typedef struct oc_attn_kernels {
    const char *name;
    int32_t vec;     /* floats per vector register; padded dims are multiples of it */
    int32_t panel;   /* columns per packed panel (2 * vec) */
    /* c[m x n] (ldc) = (accumulate ? c : 0) + a[m x k] (lda) * B (packed, k x n). */
    void (*gemm)(int32_t m, int32_t n, int32_t k, const float *a, int64_t lda, const float *b,
                 float *c, int64_t ldc, int accumulate);
    /* K^T for S = Q K^T: rows[t] is key t's row of d elements (dtype F16 or F32), NULL for a
     * padding key; writes the packed B of k = d rows and n = n_keys columns (n_keys % vec == 0). */
    void (*pack_kt)(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dtype);
    /* V for O += P V: packed B of k = n_keys rows and n = dpad columns (dpad % vec == 0), columns
     * d..dpad-1 zero. rows[t] as above (never NULL here). */
    void (*pack_v)(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype);
    /* s[t] = 2^(s[t] - m) for t < n; -inf entries give exactly 0. Returns the sum. m is finite. */
    float (*exp2_sum)(float *s, int32_t n, float m);
    /* max of s[0..n), n >= 1 (-inf when all are -inf). */
    float (*max)(const float *s, int32_t n);
    /* x[0..n) *= a */
    void (*scale)(float *x, int32_t n, float a);
} oc_attn_kernels;

/* The table for isa, or NULL when this build has no kernels for it. */
const oc_attn_kernels *oc_attn_kernels_for(oc_isa isa);

/* One per ISA file. Only the files this build compiles are referenced (attn_ref.c checks the
 * OC_HAVE_*_KERNELS switches that configure writes). */
const oc_attn_kernels *oc_attn_kernels_ref(void);
const oc_attn_kernels *oc_attn_kernels_avx2(void);
const oc_attn_kernels *oc_attn_kernels_avx512(void);
const oc_attn_kernels *oc_attn_kernels_neon(void);

#endif
