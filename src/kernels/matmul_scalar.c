/* matmul_scalar.c: the portable kernel table (always built; the test oracle's neighbour) and the
 * portable packers and activation quantizer that SIMD tables reuse. Plain loops, no intrinsics:
 * what each SIMD kernel must compute, written the obvious way (contract: matmul_kern.h). */
#include "kernels/matmul_kern.h"

#include "core/f16.h"

#include <math.h>
#include <string.h>

#define MR 4
#define NR 8
#define Q8_GROUP 8

static float dot_f32(const void *w_row, const float *x, int64_t n) {
    const float *w = w_row;
    float acc = 0;
    for (int64_t i = 0; i < n; i++) acc += w[i] * x[i];
    return acc;
}

void oc_mm_pack_f32_generic(int nr, const float *rows, size_t ld, int n_rows, int64_t kc, float *panel) {
    for (int64_t k = 0; k < kc; k++)
        for (int j = 0; j < nr; j++) panel[k * nr + j] = j < n_rows ? rows[(size_t)j * ld + (size_t)k] : 0.0f;
}

static void pack_f32(const float *rows, size_t ld, int n_rows, int64_t kc, float *panel) {
    oc_mm_pack_f32_generic(NR, rows, ld, n_rows, kc, panel);
}

static void gemm_f32(int mr, int64_t kc, const float *x, size_t x_stride, const float *panel, float *y,
                     size_t y_stride, int accumulate) {
    float acc[MR][NR];
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = accumulate ? y[(size_t)i * y_stride + (size_t)j] : 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        const float *p = panel + k * NR;
        for (int i = 0; i < mr; i++) {
            float xv = x[(size_t)i * x_stride + (size_t)k];
            for (int j = 0; j < NR; j++) acc[i][j] += xv * p[j];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR; j++) y[(size_t)i * y_stride + (size_t)j] = acc[i][j];
}

/* ---- int8 path ---------------------------------------------------------------------------------- */

void oc_mm_quantize_q8x_scalar(const float *x, int64_t n, int group, oc_q8x *out) {
    const int64_t run = (int64_t)group * OC_QK;
    for (int64_t g = 0; g < n / run; g++, x += run) {
        float amax = 0;
        for (int64_t j = 0; j < run; j++) {
            float a = fabsf(x[j]);
            if (!(a <= amax) && !isnan(amax)) amax = a;   /* the first NaN sticks: it reaches d, then Y */
        }
        float id = amax > 0 ? 127.0f / amax : 0.0f;
        for (int b = 0; b < group; b++, out++) {
            const float *xb = x + (size_t)b * OC_QK;
            out->sum = 0;
            if (!isfinite(amax)) {            /* Y becomes NaN (d * 0) instead of garbage integers */
                out->d = amax - amax;
                memset(out->qs, 0, sizeof out->qs);
                continue;
            }
            out->d = amax / 127.0f;
            for (int j = 0; j < OC_QK; j++) {
                int q = (int)roundf(xb[j] * id);
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                out->qs[j] = (int8_t)q;
                out->sum += q;
            }
        }
    }
}

/* The 32 stored values of block b of one row: Q8_0 as is, Q4_0 as unsigned nibbles in element order. */
static float load_block(int i8_type, const unsigned char *row, int64_t b, int8_t v[OC_QK]) {
    if (i8_type == OC_MM_I8_Q8_0) {
        const oc_block_q8_0 *blk = (const oc_block_q8_0 *)row + b;
        memcpy(v, blk->qs, OC_QK);
        return oc_f16_to_f32(blk->d);
    }
    const oc_block_q4_0 *blk = (const oc_block_q4_0 *)row + b;
    for (int l = 0; l < OC_QK / 2; l++) {
        v[l] = (int8_t)(blk->qs[l] & 0xF);
        v[l + OC_QK / 2] = (int8_t)(blk->qs[l] >> 4);
    }
    return oc_f16_to_f32(blk->d);
}

void oc_mm_pack_q8_generic(int i8_type, int group, int nr, unsigned xor_q, const void *w, size_t row_bytes,
                           int n_rows, int64_t n_blocks, void *panel) {
    size_t rec_bytes = OC_MM_Q8_RECORD_BYTES(group);
    for (int g = 0; g < nr / group; g++) {
        for (int64_t b = 0; b < n_blocks; b++) {
            unsigned char *rec = (unsigned char *)panel + ((size_t)g * (size_t)n_blocks + (size_t)b) * rec_bytes;
            float *d = (float *)rec;
            unsigned char *q = rec + OC_MM_Q8_Q_OFFSET(group);
            for (int j = 0; j < group; j++) {
                int row = g * group + j;
                int8_t v[OC_QK] = { 0 };
                d[j] = row < n_rows ? load_block(i8_type, (const unsigned char *)w + (size_t)row * row_bytes, b, v) : 0.0f;
                for (int k = 0; k < OC_QK; k++) q[((size_t)(k / 4) * (size_t)group + (size_t)j) * 4 + (size_t)(k % 4)] = (unsigned char)((unsigned char)v[k] ^ xor_q);
            }
        }
    }
}

static void pack_q8_0(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_pack_q8_generic(OC_MM_I8_Q8_0, Q8_GROUP, Q8_GROUP, 0, w, row_bytes, n_rows, n_blocks, panel);
}
static void pack_q4_0(const void *w, size_t row_bytes, int n_rows, int64_t n_blocks, void *panel) {
    oc_mm_pack_q8_generic(OC_MM_I8_Q4_0, Q8_GROUP, Q8_GROUP, 0, w, row_bytes, n_rows, n_blocks, panel);
}

static float dot_q8x(int i8_type, const void *w_row, const oc_q8x *x, int64_t n_blocks) {
    float acc = 0;
    for (int64_t b = 0; b < n_blocks; b++) {
        int8_t v[OC_QK];
        float d = load_block(i8_type, w_row, b, v);
        int32_t s = 0;
        for (int k = 0; k < OC_QK; k++) s += v[k] * x[b].qs[k];
        if (i8_type == OC_MM_I8_Q4_0) s -= 8 * x[b].sum;   /* stored nibble = q + 8 */
        acc += (float)s * (d * x[b].d);
    }
    return acc;
}

static float dot_q4_k(const void *w_row, const oc_q8x *x, int64_t n_blocks) {
    const oc_block_q4_k *b = w_row;
    float acc = 0;
    for (int64_t i = 0; i < n_blocks / 8; i++, b++, x += 8) {
        float d = oc_f16_to_f32(b->d), dmin = oc_f16_to_f32(b->dmin);
        /* sub-block j = x block j: sum (d sc q - dmin m) x = d sc dx sum(q xq) - dmin m dx sum(xq) */
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = b->qs + 32 * (j / 2);
            int sc, m;
            oc_q4_k_scale_min(b->scales, j, &sc, &m);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) s += ((j & 1) ? q[l] >> 4 : q[l] & 0xF) * x[j].qs[l];
            acc += (d * (float)sc * x[j].d) * (float)s - (dmin * (float)m * x[j].d) * (float)x[j].sum;
        }
    }
    return acc;
}

static float dot_q6_k(const void *w_row, const oc_q8x *x, int64_t n_blocks) {
    const oc_block_q6_k *b = w_row;
    float acc = 0;
    for (int64_t i = 0; i < n_blocks / 8; i++, b++) {
        float d = oc_f16_to_f32(b->d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
            const int8_t *sc = b->scales + 8 * h;
            /* part p of the half is elements 32p..32p+31 (x block 8i + 4h + p); 16 per scale */
            for (int p = 0; p < 4; p++) {
                const oc_q8x *xb = x + 8 * i + 4 * h + p;
                for (int e = 0; e < 2; e++) {
                    int32_t s = 0;
                    for (int l = 16 * e; l < 16 * e + 16; l++) {
                        int lo = p & 1 ? ql[l + 32] : ql[l];
                        int q = (p < 2 ? lo & 0xF : lo >> 4) | (((qh[l] >> (2 * p)) & 3) << 4);
                        s += (q - 32) * xb->qs[l];
                    }
                    acc += (d * (float)sc[e + 2 * p] * xb->d) * (float)s;
                }
            }
        }
    }
    return acc;
}

/* The scalar table's GEMV kernels take one row per call (q8_gemv_rows 1). */
static void gemv_q8_0(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y) {
    for (int r = 0; r < n_rows; r++) y[r] = dot_q8x(OC_MM_I8_Q8_0, (const unsigned char *)w + (size_t)r * row_bytes, x, n_blocks);
}
static void gemv_q4_0(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y) {
    for (int r = 0; r < n_rows; r++) y[r] = dot_q8x(OC_MM_I8_Q4_0, (const unsigned char *)w + (size_t)r * row_bytes, x, n_blocks);
}
static void gemv_q4_k(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y) {
    for (int r = 0; r < n_rows; r++) y[r] = dot_q4_k((const unsigned char *)w + (size_t)r * row_bytes, x, n_blocks);
}
static void gemv_q6_k(const void *w, size_t row_bytes, int n_rows, const oc_q8x *x, int64_t n_blocks, float *y) {
    for (int r = 0; r < n_rows; r++) y[r] = dot_q6_k((const unsigned char *)w + (size_t)r * row_bytes, x, n_blocks);
}

static void gemm_q8(int i8_type, int mr, int64_t n_blocks, const oc_q8x *x, size_t x_stride_blocks,
                    const void *panel, float *y, size_t y_stride, int accumulate) {
    const size_t rec_bytes = OC_MM_Q8_RECORD_BYTES(Q8_GROUP);
    for (int i = 0; i < mr; i++) {
        const oc_q8x *xi = x + (size_t)i * x_stride_blocks;
        float acc[Q8_GROUP];
        for (int j = 0; j < Q8_GROUP; j++) acc[j] = accumulate ? y[(size_t)i * y_stride + (size_t)j] : 0.0f;
        for (int64_t b = 0; b < n_blocks; b++) {
            const unsigned char *rec = (const unsigned char *)panel + (size_t)b * rec_bytes;
            const float *d = (const float *)rec;
            const int8_t *q = (const int8_t *)(rec + OC_MM_Q8_Q_OFFSET(Q8_GROUP));
            for (int j = 0; j < Q8_GROUP; j++) {
                int32_t s = 0;
                for (int st = 0; st < OC_QK / 4; st++)
                    for (int u = 0; u < 4; u++) s += q[(st * Q8_GROUP + j) * 4 + u] * xi[b].qs[4 * st + u];
                if (i8_type == OC_MM_I8_Q4_0) s -= 8 * xi[b].sum;
                acc[j] += (float)s * (d[j] * xi[b].d);
            }
        }
        for (int j = 0; j < Q8_GROUP; j++) y[(size_t)i * y_stride + (size_t)j] = acc[j];
    }
}
static void gemm_q8_0(int mr, int64_t n_blocks, const oc_q8x *x, size_t xs, const void *panel, float *y, size_t ys, int acc) {
    gemm_q8(OC_MM_I8_Q8_0, mr, n_blocks, x, xs, panel, y, ys, acc);
}
static void gemm_q4_0(int mr, int64_t n_blocks, const oc_q8x *x, size_t xs, const void *panel, float *y, size_t ys, int acc) {
    gemm_q8(OC_MM_I8_Q4_0, mr, n_blocks, x, xs, panel, y, ys, acc);
}

/* ---- BF16 path (the reference micro-kernel; the scalar table offers it only when forced) -------- */

void oc_mm_x_to_bf16_scalar(const float *x, int64_t n, uint16_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = oc_f32_to_bf16(x[i]);
}

void oc_mm_pack_bf16_generic(const uint32_t *rows, size_t ld, int n_rows, int64_t n_pairs, uint32_t *panel) {
    for (int64_t p = 0; p < n_pairs; p++)
        for (int j = 0; j < OC_MM_BF16_NR; j++)
            panel[p * OC_MM_BF16_NR + j] = j < n_rows ? rows[(size_t)j * ld + (size_t)p] : 0u;
}

void oc_mm_gemm_bf16_scalar(int mr, int64_t n_pairs, const uint32_t *x, size_t x_stride, const uint32_t *panel,
                            float *y, size_t y_stride, int accumulate) {
    for (int i = 0; i < mr; i++) {
        float acc[OC_MM_BF16_NR];
        for (int j = 0; j < OC_MM_BF16_NR; j++) acc[j] = accumulate ? y[(size_t)i * y_stride + (size_t)j] : 0.0f;
        for (int64_t p = 0; p < n_pairs; p++) {
            uint32_t xp = x[(size_t)i * x_stride + (size_t)p];
            float xe = oc_bf16_to_f32((uint16_t)(xp & 0xffff)), xo = oc_bf16_to_f32((uint16_t)(xp >> 16));
            for (int j = 0; j < OC_MM_BF16_NR; j++) {
                uint32_t wp = panel[(size_t)p * OC_MM_BF16_NR + (size_t)j];
                /* each bf16 x bf16 product is exact in f32: only the two sums round */
                acc[j] += xo * oc_bf16_to_f32((uint16_t)(wp >> 16));
                acc[j] += xe * oc_bf16_to_f32((uint16_t)(wp & 0xffff));
            }
        }
        for (int j = 0; j < OC_MM_BF16_NR; j++) y[(size_t)i * y_stride + (size_t)j] = acc[j];
    }
}

static const oc_matmul_kernels table = {
    .isa = OC_ISA_SCALAR,
    .name = "scalar",
    .mr = MR,
    .nr = NR,
    .to_f32 = { oc_dequant_f32, oc_dequant_f16, oc_dequant_bf16, oc_dequant_q8_0, oc_dequant_q4_0,
                oc_dequant_q4_k, oc_dequant_q6_k },
    .dot_f32 = { dot_f32, NULL, NULL, NULL, NULL, NULL, NULL },
    .pack_f32 = pack_f32,
    .gemm_f32 = gemm_f32,
    .q8_mr = MR,
    .q8_nr = Q8_GROUP,
    .q8_group = Q8_GROUP,
    .q8_gemv_rows = 1,
    .quantize_q8x = oc_mm_quantize_q8x_scalar,
    .gemv_q8x = { gemv_q8_0, gemv_q4_0, gemv_q4_k, gemv_q6_k },
    .pack_q8 = { pack_q8_0, pack_q4_0, NULL, NULL },
    .gemm_q8 = { gemm_q8_0, gemm_q4_0, NULL, NULL },
    .int8_gemm = { 0, 0, 0, 0 },
    .int8_gemv = { 0, 0, 0, 0 },
    .bf16_mr = MR,
    .bf16_gemm = 0,
    .x_to_bf16 = oc_mm_x_to_bf16_scalar,
    .gemm_bf16 = oc_mm_gemm_bf16_scalar,
    .pack_bf16 = oc_mm_pack_bf16_generic,
};

const oc_matmul_kernels *oc_matmul_kernels_scalar(void) { return &table; }
