/* attn_kernels.h: the micro-kernels behind the attention engine, one table per ISA
 * (attn_scalar.c scalar, attn_avx2.c, attn_avx512.c, attn_neon.c). attn.c owns all control flow
 * (tiles, masks, online softmax bookkeeping, threads); a table only holds the inner loops.
 *
 * The engine computes scores transposed, S^T = K Q^T (keys x query rows), so that K needs no
 * transpose: a K tile is only converted to f32 rows, and the (stacked, scaled) queries are packed
 * transposed once per run of rows instead of once per key tile. The softmax then runs down the
 * columns of S^T, vectorized across query rows, and O += P V reads P from S^T transposed.
 *
 * Packed "B" operands: a B of k rows and n columns is stored in column panels: panel p holds
 * columns [p*panel, p*panel + panel) as k rows of `panel` floats, panels one after another (offset
 * p * k * panel). When n % panel != 0 the last panel is `vec` wide; n is always a multiple of vec.
 * Zero-filled padding makes every panel full, so the kernels need no column remainder code and any
 * head dim runs the vector path (ggml's tiled path requires DV % simd width == 0 and falls back to
 * a scalar loop otherwise). */
#ifndef OC_ATTN_KERNELS_H
#define OC_ATTN_KERNELS_H

#include "core/core.h"
#include "core/isa.h"

typedef struct oc_attn_kernels {
    const char *name;
    int32_t vec;     /* floats per vector register; padded dims are multiples of it */
    int32_t panel;   /* columns per packed panel (2 * vec) */
    /* c[m x n] (ldc) = (accumulate ? c : 0) + A[m x k] * B (packed, k x n), where element (i, kk)
     * of A is a[i * a_rs + kk * a_cs] (a_cs = 1: row-major; a_rs = 1: A stored transposed). */
    void (*gemm)(int32_t m, int32_t n, int32_t k, const float *a, int64_t a_rs, int64_t a_cs,
                 const float *b, float *c, int64_t ldc, int accumulate);
    /* dst[t * d + c] = row t element c, for t < n_rows, c < d; rows[t] holds d elements of dtype
     * (OC_DTYPE_F16 or OC_DTYPE_F32). */
    void (*convert_rows)(float *dst, const void *const *rows, int32_t n_rows, int32_t d, int32_t dtype);
    /* V for O += P V: packed B of k = n_keys rows and n = dpad columns (dpad % vec == 0), columns
     * d..dpad-1 zero. */
    void (*pack_v)(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype);
    /* Online softmax (base 2) down the columns of s[n_keys x n_cols] (row stride lds, n_cols % vec
     * == 0, masked entries -inf): per column c, with running max m[c] and sum l[c]:
     *   m' = max(m, max_t s[t][c]);  s[t][c] = 2^(s[t][c] - m');  l = alpha l + sum_t s[t][c];
     *   alpha[c] = 2^(m - m') (0 while m is -inf), m = m'.
     * A column with every entry -inf (and m = -inf) gets P = 0, alpha = 0, l unchanged. */
    void (*softmax_cols)(float *s, int64_t lds, int32_t n_keys, int32_t n_cols, float *m, float *l, float *alpha);
    /* Q^T for S^T = K Q^T: packed B of k = d rows and n = n_cols columns (n_cols % vec == 0), column
     * t = rows[t][0..d) * scale for t < n_rows, zero above. */
    void (*pack_qt)(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d, float scale);
    /* dst[0..n) = src[0..n) * a (dst == src allowed) */
    void (*scale)(float *dst, const float *src, int32_t n, float a);
    /* The direct path for runs of few stacked rows (decode: one query row per head, the GQA group
     * stacked; attn.c takes it for at most OC_ATTN_DIRECT_ROWS rows). K and V rows are read in
     * place, each element converted in registers and used for every row, so there is no f32 copy
     * of the tile and no query column padding (the GEMM path pads 6 rows to 16 columns).
     * dot_rows: s[t * lds + r] = q[r * d .. r * d + d) . krows[t][0..d) for r < n_rows, t < n_keys,
     * and s[t * lds + r] = 0 for n_rows <= r < n_cols (q: n_rows rows of d floats, scaled; a table
     * may read rows up to the next multiple of 8 and ignore them, so q must hold that many).
     * vrows: the tile's V rows, which acc_rows reads next; a table may prefetch them meanwhile. */
    void (*dot_rows)(float *s, int64_t lds, const float *q, int32_t n_rows, int32_t n_cols, const void *const *krows,
                     const void *const *vrows, int32_t n_keys, int32_t d, int32_t dtype);
    /* acc_rows: o[r * ldo + c] += sum_t p[t * ldp + r] * vrows[t][c] for r < n_rows, c < d (the
     * columns d.. of o are not touched). */
    void (*acc_rows)(float *o, int64_t ldo, const float *p, int64_t ldp, int32_t n_rows, const void *const *vrows,
                     int32_t n_keys, int32_t d, int32_t dtype);
    /* NULL for the f32 tables. A BF16 table (attn_bf16_avx512.c) holds gemm's a and b, and so the
     * outputs of convert_rows, pack_v and pack_qt, as 32-bit words of two bf16 elements adjacent in k
     * (k odd: a zero partner), in the f32 layouts' places and panel offsets; its gemm takes a_rs, a_cs
     * in words and k in elements. pack_p turns the probabilities s[n_keys x n_cols] (row stride lds)
     * into that form in place before O += P V: word (pair j, column c) at s[j * lds + c]. */
    void (*pack_p)(float *s, int64_t lds, int32_t n_keys, int32_t n_cols);
    /* MMInference's estimate (dyn_build.c), NULL where a table has none (a portable loop runs):
     * out[t] += (((0 + s[t][0] w[0]) + s[t][1] w[1]) + ... + s[t][n_cols - 1] w[n_cols - 1]) for
     * t < n_keys (s: row stride lds; n_cols % 16 == 0), each product rounded before its sum, the
     * columns in ascending order: the plain loop's floats, several keys at once (a block of keys
     * transposed in registers, a vector lane per key). */
    void (*col_sums)(const float *s, int64_t lds, int32_t n_keys, int32_t n_cols, const float *w, float *out);
} oc_attn_kernels;

/* Stacked rows up to which the engine runs a tile through dot_rows / acc_rows. */
#define OC_ATTN_DIRECT_ROWS 16

/* The table for isa, or NULL when this build has no kernels for it. */
const oc_attn_kernels *oc_attn_kernels_for(oc_isa isa);

/* One per ISA file. Only the files this build compiles are referenced (attn.c checks the
 * OC_HAVE_*_KERNELS switches that configure writes). */
const oc_attn_kernels *oc_attn_kernels_scalar(void);
const oc_attn_kernels *oc_attn_kernels_avx2(void);
const oc_attn_kernels *oc_attn_kernels_avx512(void);
/* The AVX-512 table with the products on vdpbf16ps (needs AVX512_BF16; attn.c picks it for calls
 * with bf16_products where oc_cpu_features.bf16_fast is set). */
const oc_attn_kernels *oc_attn_kernels_avx512_bf16(void);
const oc_attn_kernels *oc_attn_kernels_neon(void);

/* Shared by the AVX2 and AVX-512 tables (defined in attn_avx2.c; an AVX-512 build always has AVX2):
 * pack_qt for a table whose panels are `panel` columns wide and whose vectors hold `vec` floats. */
/* attn_bf16_avx512.c: the BF16 table's own entries (the rest is attn_avx512.c's). */
void oc_attn_bf16_gemm(int32_t m, int32_t n, int32_t k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                       float *c, int64_t ldc, int accumulate);
void oc_attn_bf16_convert_rows(float *dst, const void *const *rows, int32_t n_rows, int32_t d, int32_t dtype);
void oc_attn_bf16_pack_v(float *dst, const void *const *rows, int32_t n_keys, int32_t d, int32_t dpad, int32_t dtype);
void oc_attn_bf16_pack_qt(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d, float scale);
void oc_attn_bf16_pack_p(float *s, int64_t lds, int32_t n_keys, int32_t n_cols);

void oc_attn_avx2_pack_qt(float *dst, const float *const *rows, int32_t n_rows, int32_t n_cols, int32_t d,
                          float scale, int32_t panel, int32_t vec);

/* A micro-kernel's row count as a compile-time constant, up to the ISA's register budget (6 rows
 * for AVX2 and NEON, 12 for AVX-512): each ISA's tile loops are instantiated through one of these. */
#define OC_ATTN_DISPATCH_ROWS_6(kernel, rows, ...) \
    switch (rows) {                      \
    case 1: kernel(1, __VA_ARGS__); break; \
    case 2: kernel(2, __VA_ARGS__); break; \
    case 3: kernel(3, __VA_ARGS__); break; \
    case 4: kernel(4, __VA_ARGS__); break; \
    case 5: kernel(5, __VA_ARGS__); break; \
    default: kernel(6, __VA_ARGS__); break; \
    }

#define OC_ATTN_DISPATCH_ROWS_12(kernel, rows, ...) \
    switch (rows) {                      \
    case 1: kernel(1, __VA_ARGS__); break; \
    case 2: kernel(2, __VA_ARGS__); break; \
    case 3: kernel(3, __VA_ARGS__); break; \
    case 4: kernel(4, __VA_ARGS__); break; \
    case 5: kernel(5, __VA_ARGS__); break; \
    case 6: kernel(6, __VA_ARGS__); break; \
    case 7: kernel(7, __VA_ARGS__); break; \
    case 8: kernel(8, __VA_ARGS__); break; \
    case 9: kernel(9, __VA_ARGS__); break; \
    case 10: kernel(10, __VA_ARGS__); break; \
    case 11: kernel(11, __VA_ARGS__); break; \
    default: kernel(12, __VA_ARGS__); break; \
    }

#endif
