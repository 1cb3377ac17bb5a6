/* matmul_kern.h: the contract between the generic matmul driver (matmul.c) and the per-ISA
 * micro-kernels (matmul_scalar.c, matmul_avx2.c, matmul_avx512.c, matmul_neon.c). Internal.
 *
 * Float path: the driver dequantizes nr rows x kc columns of W to f32 (to_f32), packs them k-major
 * into a panel (pack_f32: panel[k][0..nr)) and runs gemm_f32, which broadcasts X[t][k] against the
 * panel's vector of nr outputs for mr tokens at a time.
 * Int8 path (Q8_0, Q4_0; for Q4_K / Q6_K only the GEMV): X is quantized once per call to oc_q8x
 * blocks; the GEMV kernel (gemv_q8x) dots q8_gemv_rows weight rows at once with them; for the GEMM,
 * W blocks are packed into groups of `q8_group` outputs with 4 consecutive k per output side by
 * side (the operand shape of x86 vpmaddubsw/vpdpbusd and Arm sdot), and gemm_q8 accumulates integer
 * dots per block of 32, scaled by d_w * d_x in f32.
 * BF16 path (F16 / BF16 weights; GEMM only): each task packs its W rows per block of KC inputs in
 * the operand shape of x86 vdpbf16ps (and Arm BFDOT): panels of OC_MM_BF16_NR outputs;
 * in a panel, for each pair of inputs (2p, 2p + 1), one uint32 per output holding W[j][2p] in its
 * low half and W[j][2p + 1] in its high half, rounded to bf16 (nearest even); outputs past n_out
 * are 0. The driver rounds KC inputs of mr tokens of X to the same pairs per tile (x_to_bf16) and
 * gemm_bf16 sums the pair products in f32.
 * A table's pack_q8 / pack_bf16 may order the bytes of a panel differently for its own gemm_q8 /
 * gemm_bf16 (the panel's size stays the one given here; the driver only sizes and hands it on): the
 * NEON "+i8mm" table keeps each output's k run contiguous for SMMLA / BFMMLA (matmul_neon.c). */
#ifndef OC_MATMUL_KERN_H
#define OC_MATMUL_KERN_H

#include "kernels/matmul.h"
#include "kernels/quant.h"

/* Index of each supported weight type in the per-type arrays below. */
enum { OC_MM_F32, OC_MM_F16, OC_MM_BF16, OC_MM_Q8_0, OC_MM_Q4_0, OC_MM_Q4_K, OC_MM_Q6_K, OC_MM_N_TYPES };
/* Index into the int8 arrays. Q4_K and Q6_K have int8 GEMV dot products only (no pack_q8/gemm_q8):
 * their prefill GEMM takes the float path. */
enum { OC_MM_I8_Q8_0, OC_MM_I8_Q4_0, OC_MM_I8_Q4_K, OC_MM_I8_Q6_K, OC_MM_I8_N };

/* An activation block of the int8 path: x[j] ~ d * qs[j], |qs| <= 127 (never -128, so the x86 sign
 * trick cannot overflow); sum = sum of qs (Q4_0 stores w + 8 and subtracts 8 * sum). */
typedef struct oc_q8x {
    float d;
    int32_t sum;
    int8_t qs[OC_QK];
} oc_q8x;

/* Int8 panel: for each group of G = q8_group outputs, for each block of 32 inputs, one record of
 *   float d[G];         d_w of each output's block (0 for padding rows)
 *   uint8_t q[8][G][4]; q[s][j][u] = stored value of W[j][4s + u]
 * where the stored value is what the table's gemm_q8 multiplies: by default Q8_0 as signed bytes and
 * Q4_0 as its unsigned nibble 0..15 (x86 VNNI tables store Q8_0 as w + 128, see matmul_avx512.c).
 * A record is G * 36 bytes; a micro-panel of nr outputs is nr/G groups, each n_blocks records.
 * (The NEON "+i8mm" table: G = 8, q bytes in 16-byte runs of 2 outputs x 8 k, Q4_0 as nibble - 8.) */
#define OC_MM_Q8_Q_OFFSET(group) ((size_t)(group) * 4)
#define OC_MM_Q8_RECORD_BYTES(group) (OC_MM_Q8_Q_OFFSET(group) + (size_t)(group) * 32)

typedef float (*oc_dot_f32_fn)(const void *w_row, const float *x, int64_t n);
/* rows: n_rows (<= nr) rows of kc floats, ld floats apart -> panel[k * nr + j]; j >= n_rows is 0. */
typedef void (*oc_pack_f32_fn)(const float *rows, size_t ld, int n_rows, int64_t kc, float *panel);
/* y[i][j] (= or +=) sum_k x[i][k] * panel[k][j] for i < mr (1..k->mr), j < nr. */
typedef void (*oc_gemm_f32_fn)(int mr, int64_t kc, const float *x, size_t x_stride, const float *panel,
                               float *y, size_t y_stride, int accumulate);
/* x[0..n) -> n / 32 blocks; each run of `group` consecutive blocks (1, or 8 for Q4_K and Q6_K: a
 * super-block of 256) shares one d = amax(run) / 127, so a K-quant GEMV can sum a super-block's 8
 * integer dots before one conversion to f32 (llama.cpp's Q8_K does the same). n is a multiple of
 * 32 * group. */
typedef void (*oc_quantize_q8x_fn)(const float *x, int64_t n, int group, oc_q8x *out);
/* The group the driver quantizes X with for an int8 type: the Q4_K GEMV kernels of avx2 and neon
 * and the Q6_K GEMV of avx2 rely on it (one dx per super-block); the others take any group. */
static inline int oc_mm_i8_x_group(int i8_type) { return i8_type == OC_MM_I8_Q4_K || i8_type == OC_MM_I8_Q6_K ? 8 : 1; }
/* GEMV against quantized x: y[r] = dot(W row r, x) for r < n_rows (1..q8_gemv_rows), rows row_bytes
 * apart from w; n_blocks counts blocks of 32 (n_in / 32) for every type. The rows of one call share
 * every load and conversion of x; each row's sum depends only on that row and x (not on n_rows or
 * on which call it is in), so results do not depend on how the driver groups rows. */
typedef void (*oc_gemv_q8x_fn)(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks,
                               float *y);
/* GEMV of long float rows: y[r] = dot(W row r, x) for r < n_rows (1..gemv_long_rows), n elements
 * per row, rows row_bytes apart, the rows sharing every load of x. For rows whose x does not stay
 * in L1 next to the weight stream (n_in > OC_MM_GEMV_LONG_N_IN), where one row at a time reads x
 * from L2 for every row and the weights stream at half speed (down projection, n_in 8960: 12 vs
 * 26 GB/s on one Zen 4 core, BENCHMARKS.md "matmul"). Each row's sum depends only on
 * that row and x, as for gemv_q8x. */
typedef void (*oc_gemv_rows_fn)(const void *w, size_t row_bytes, int n_rows, const float *x, int64_t n, float *y);
#define OC_MM_GEMV_LONG_N_IN 4096
/* n_rows (<= q8_nr) rows, n_blocks blocks each, rows row_bytes apart -> one micro-panel. */
typedef void (*oc_pack_q8_fn)(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel);
/* y[i][j] (= or +=) sum_b dot(x[i] block b, panel column j block b) for i < mr, j < q8_nr. */
typedef void (*oc_gemm_q8_fn)(int mr, int64_t n_blocks, const oc_q8x *x, size_t x_stride_blocks,
                              const void *panel, float *y, size_t y_stride, int accumulate);

/* BF16 path: outputs per packed panel (all tables). */
#define OC_MM_BF16_NR 32
/* x[0..n) -> n bf16, nearest even (n even); NaN stays NaN (quiet). An f32 subnormal may become the
 * zero of its sign (x86's vcvtneps2bf16 does; the BF16 dot products read bf16 subnormals as zero). */
typedef void (*oc_x_to_bf16_fn)(const float *x, int64_t n, uint16_t *out);
/* y[i][j] (= or +=) sum_p x_i(2p) W_j(2p) + x_i(2p+1) W_j(2p+1) for i < mr (1..bf16_mr), j < 32: x
 * rows of bf16 pairs (uint32), x_stride pairs apart; panel: n_pairs x 32 uint32 pairs. */
typedef void (*oc_gemm_bf16_fn)(int mr, int64_t n_pairs, const uint32_t *x, size_t x_stride, const uint32_t *panel,
                                float *y, size_t y_stride, int accumulate);
/* f16 src[0..n) -> bf16 out (through f32, exact, then nearest even, as x_to_bf16 rounds). */
typedef void (*oc_f16_to_bf16_fn)(const uint16_t *src, int64_t n, uint16_t *out);
/* rows: n_rows (<= 32) rows of n_pairs bf16 pairs (uint32), ld pairs apart -> panel[p * 32 + j];
 * j >= n_rows is 0. A 32-bit transpose: the bits are moved, never converted. */
typedef void (*oc_pack_bf16_fn)(const uint32_t *rows, size_t ld, int n_rows, int64_t n_pairs, uint32_t *panel);

struct oc_matmul_kernels {
    oc_isa isa;
    const char *name;
    /* float path */
    int mr, nr;
    oc_to_f32_fn to_f32[OC_MM_N_TYPES];
    oc_dot_f32_fn dot_f32[OC_MM_N_TYPES];   /* NULL: dequantize the row, then dot_f32[OC_MM_F32] */
    oc_gemv_rows_fn gemv_long[OC_MM_N_TYPES];   /* NULL: dot_f32 row by row */
    int gemv_long_rows;
    oc_pack_f32_fn pack_f32;
    oc_gemm_f32_fn gemm_f32;
    /* int8 path */
    int q8_mr, q8_nr, q8_group, q8_gemv_rows;
    oc_quantize_q8x_fn quantize_q8x;
    oc_gemv_q8x_fn gemv_q8x[OC_MM_I8_N];
    oc_pack_q8_fn pack_q8[OC_MM_I8_N];
    oc_gemm_q8_fn gemm_q8[OC_MM_I8_N];
    /* OC_MATMUL_AUTO takes the int8 path where these are 1 (measured, BENCHMARKS.md "matmul") */
    unsigned char int8_gemm[OC_MM_I8_N], int8_gemv[OC_MM_I8_N];
    /* BF16 path (bf16_mr 0: none); AUTO takes it (and callers pack weights for it) where bf16_gemm
     * is 1: the CPU's BF16 dot products are at least as fast as its FP32 FMA (BENCHMARKS.md) */
    int bf16_mr;
    unsigned char bf16_gemm;
    oc_x_to_bf16_fn x_to_bf16;
    oc_gemm_bf16_fn gemm_bf16;
    oc_pack_bf16_fn pack_bf16;
    oc_f16_to_bf16_fn f16_to_bf16;   /* NULL: to_f32 then x_to_bf16 */
};

/* Portable pieces that SIMD tables reuse (matmul_scalar.c). xor_q is xor-ed into every stored byte
 * (0x80 turns signed Q8_0 into w + 128). */
void oc_mm_pack_f32_generic(int nr, const float *rows, size_t ld, int n_rows, int64_t kc, float *panel);
void oc_mm_pack_q8_generic(int i8_type, int group, int nr, unsigned xor_q, const void *w, size_t row_bytes,
                           int n_rows, int64_t n_blocks, void *panel);
void oc_mm_quantize_q8x_scalar(const float *x, int64_t n, int group, oc_q8x *out);
void oc_mm_x_to_bf16_scalar(const float *x, int64_t n, uint16_t *out);
void oc_mm_pack_bf16_generic(const uint32_t *rows, size_t ld, int n_rows, int64_t n_pairs, uint32_t *panel);
/* The reference BF16 micro-kernel (mr <= 8): every product and sum in f32 in the order vdpbf16ps
 * takes (odd element of the pair, then even). */
void oc_mm_gemm_bf16_scalar(int mr, int64_t n_pairs, const uint32_t *x, size_t x_stride, const uint32_t *panel,
                            float *y, size_t y_stride, int accumulate);

/* AVX2 pieces the AVX-512 table reuses where 512-bit vectors gain nothing (matmul_avx2.c; every
 * AVX-512 CPU has AVX2). pack_f32: nr a multiple of 8; pack_q8: group a multiple of 8, nr = group. */
void oc_mm_avx2_pack_f32(int nr, const float *rows, size_t ld, int n_rows, int64_t kc, float *panel);
void oc_mm_avx2_pack_q8(int i8_type, int group, unsigned xor_q, const void *w, size_t row_bytes, int n_rows,
                        int64_t n_blocks, void *panel);
void oc_mm_avx2_quantize_q8x(const float *x, int64_t n, int group, oc_q8x *out);
void oc_mm_avx2_to_f32_f16(const void *src, float *dst, int64_t n);
void oc_mm_avx2_to_f32_bf16(const void *src, float *dst, int64_t n);
void oc_mm_avx2_to_f32_q8_0(const void *src, float *dst, int64_t n);
void oc_mm_avx2_to_f32_q4_0(const void *src, float *dst, int64_t n);
void oc_mm_avx2_to_f32_q4_k(const void *src, float *dst, int64_t n);
void oc_mm_avx2_to_f32_q6_k(const void *src, float *dst, int64_t n);
float oc_mm_avx2_dot_f32(const void *w_row, const float *x, int64_t n);
float oc_mm_avx2_dot_f16(const void *w_row, const float *x, int64_t n);
float oc_mm_avx2_dot_bf16(const void *w_row, const float *x, int64_t n);
float oc_mm_avx2_dot_f32_q8_0(const void *w_row, const float *x, int64_t n);
float oc_mm_avx2_dot_f32_q4_0(const void *w_row, const float *x, int64_t n);
#define OC_MM_AVX2_LONG_ROWS 10
void oc_mm_avx2_gemv_long_f32(const void *w, size_t row_bytes, int n_rows, const float *x, int64_t n, float *y);
void oc_mm_avx2_gemv_long_f16(const void *w, size_t row_bytes, int n_rows, const float *x, int64_t n, float *y);
void oc_mm_avx2_gemv_long_bf16(const void *w, size_t row_bytes, int n_rows, const float *x, int64_t n, float *y);
#define OC_MM_AVX2_GEMV_LONG { oc_mm_avx2_gemv_long_f32, oc_mm_avx2_gemv_long_f16, oc_mm_avx2_gemv_long_bf16 }
#define OC_MM_AVX2_GEMV_ROWS 4
void oc_mm_avx2_gemv_q8_0(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y);
void oc_mm_avx2_gemv_q4_0(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y);
void oc_mm_avx2_gemv_q4_k(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y);
void oc_mm_avx2_gemv_q6_k(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y);
/* Table initializers for the fields both x86 tables share. */
#define OC_MM_AVX2_TO_F32 { oc_dequant_f32, oc_mm_avx2_to_f32_f16, oc_mm_avx2_to_f32_bf16, oc_mm_avx2_to_f32_q8_0, \
                            oc_mm_avx2_to_f32_q4_0, oc_mm_avx2_to_f32_q4_k, oc_mm_avx2_to_f32_q6_k }
#define OC_MM_AVX2_DOT_F32 { oc_mm_avx2_dot_f32, oc_mm_avx2_dot_f16, oc_mm_avx2_dot_bf16, oc_mm_avx2_dot_f32_q8_0, \
                             oc_mm_avx2_dot_f32_q4_0, NULL, NULL }
#define OC_MM_AVX2_GEMV_Q8X { oc_mm_avx2_gemv_q8_0, oc_mm_avx2_gemv_q4_0, oc_mm_avx2_gemv_q4_k, oc_mm_avx2_gemv_q6_k }

/* Per-ISA tables; NULL when the table needs CPU features this CPU lacks. */
const oc_matmul_kernels *oc_matmul_kernels_scalar(void);
const oc_matmul_kernels *oc_matmul_kernels_avx2(void);
const oc_matmul_kernels *oc_matmul_kernels_avx512(const oc_cpu_features *cpu);
const oc_matmul_kernels *oc_matmul_kernels_neon(const oc_cpu_features *cpu);

#endif
