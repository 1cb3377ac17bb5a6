/* cl_ops.h: the per-op functions of the OpenCL backend on device buffers: the same operations as
 * src/kernels/nn.h, src/kernels/matmul.h and the embedding / KV-cache / greedy-sampling steps of the decoder, each
 * one kernel launch (opencl/NAME.cl) queued on the device. Nothing is read back except by
 * oc_cl_download; nothing allocates except the weight upload (at load time).
 *
 * Matrices are f32 rows: oc_cl_mat { buf, off, stride }: element (r, c) is float number
 * off + r * stride + c of buf. Every function checks that what it touches lies inside the
 * buffers (OC_ERR_RANGE) and fits the kernels' 32-bit element indices. */
#ifndef OC_CL_OPS_H
#define OC_CL_OPS_H

#include "opencl/cl_device.h"
#include "kernels/matmul.h"
#include "kernels/nn.h"

typedef struct oc_cl_mat {
    oc_cl_buf *buf;
    int64_t off, stride;   /* in floats */
} oc_cl_mat;

static inline oc_cl_mat oc_cl_mat_of(oc_cl_buf *buf, int64_t off, int64_t stride) {
    oc_cl_mat m = { buf, off, stride };
    return m;
}

/* ---- norms, activations, rotary, residuals (src/kernels/nn.h) --------------------------------------------- */

typedef enum oc_cl_norm_kind { OC_CL_NORM_RMS = 0, OC_CL_NORM_LAYER } oc_cl_norm_kind;

/* For rows r < n_rows of n floats: x[r] += res[r] when res.buf != NULL (the residual add, fused);
 * then, when y.buf != NULL, y[r] = norm(x[r]) * w (+ b for LAYER), with RMS = oc_rms_norm and
 * LAYER = oc_layer_norm of src/kernels/nn.h. w, b: n floats or NULL. y may be x or res. */
oc_status oc_cl_norm(oc_cl_device *dev, oc_cl_norm_kind kind, oc_cl_mat y, oc_cl_mat x, oc_cl_mat res,
                     const oc_cl_buf *w, const oc_cl_buf *b, int64_t n_rows, int64_t n, float eps, oc_error *err);
/* x[i] = act(x[i]) for i < n, from float off. */
oc_status oc_cl_act(oc_cl_device *dev, oc_cl_buf *x, int64_t off, int64_t n, oc_act act, oc_error *err);
/* out[i] = act(gate[i]) * up[i] (SwiGLU with OC_ACT_SILU); out may alias gate or up. */
oc_status oc_cl_glu(oc_cl_device *dev, oc_cl_buf *out, int64_t out_off, const oc_cl_buf *gate, int64_t gate_off,
                    const oc_cl_buf *up, int64_t up_off, int64_t n, oc_act act, oc_error *err);
/* y[i] += x[i] */
oc_status oc_cl_add(oc_cl_device *dev, oc_cl_buf *y, int64_t y_off, const oc_cl_buf *x, int64_t x_off, int64_t n,
                    oc_error *err);
/* NEOX rotary (oc_rope_neox) on n_heads heads of n_tokens tokens: head h of token t starts at
 * float off + t * stride_token + h * stride_head of x; the tables hold n_pairs cos / sin values per
 * token (rows of the oc_cl_mat). */
oc_status oc_cl_rope_neox(oc_cl_device *dev, oc_cl_buf *x, int64_t off, int64_t stride_token, int64_t stride_head,
                          int32_t n_tokens, int32_t n_heads, int32_t n_pairs, oc_cl_mat cos_t, oc_cl_mat sin_t,
                          oc_error *err);

/* A decode step's oc_cl_rope_neox on q (n_head heads) and k (n_head_kv heads) and oc_cl_kv_store of
 * k and v into f16 caches, in one launch: n_tokens rows of q from q.off (q.stride apart) and of
 * k and v from k_off / v_off (kv_stride apart), heads head_dim floats apart; the caches' rows
 * n_head_kv * head_dim halves apart from k_dst / v_dst (in halves); tables as oc_cl_rope_neox. */
oc_status oc_cl_rope_store(oc_cl_device *dev, oc_cl_mat q, oc_cl_buf *k, int64_t k_off, const oc_cl_buf *v,
                           int64_t v_off, int64_t kv_stride, int32_t n_tokens, int32_t n_head, int32_t n_head_kv,
                           int32_t head_dim, int32_t n_pairs, oc_cl_mat cos_t, oc_cl_mat sin_t, oc_cl_buf *k_cache,
                           int64_t k_dst, oc_cl_buf *v_cache, int64_t v_dst, oc_error *err);

/* dst row r = src row idx[idx_off + r / unit] * unit + r % unit for r < n_rows, rows of dim floats
 * packed from dst_off / src_off (Qwen2.5-VL's window order and its inverse); idx: int32 on the
 * device, ceil(n_rows / unit) of them (the last unit may be partial). A source row outside
 * [0, n_src_rows) leaves its destination row as it was. */
oc_status oc_cl_gather_rows(oc_cl_device *dev, oc_cl_buf *dst, int64_t dst_off, const oc_cl_buf *src, int64_t src_off,
                            int64_t n_src_rows, const oc_cl_buf *idx, int64_t idx_off, int64_t n_rows, int64_t dim,
                            int32_t unit, oc_error *err);

/* ---- weights and matrix products (src/kernels/matmul.h) ----------------------------------------------------- */

/* A weight on the device: n_out rows of n_in elements of dtype, row_bytes apart from byte 0 of buf. */
typedef struct oc_cl_weight {
    oc_cl_buf *buf;
    int32_t dtype;        /* OC_DTYPE_F32, F16, Q8_0 or Q4_0 */
    int64_t n_in, n_out;
    int64_t row_bytes;
} oc_cl_weight;

/* 1 when the device kernels take weights of dtype. */
int oc_cl_weight_type_ok(int32_t dtype);
/* Upload w once. to_f32: store it dequantized to F32 (CLBlast then takes it; 2-4x the memory).
 * [alloc: device buffer (+ a host staging row block when to_f32)] [errors: OC_ERR_UNSUPPORTED
 * (type), OC_ERR_RANGE (too large for the device), OC_ERR_DEVICE, OC_ERR_NOMEM] */
oc_status oc_cl_weight_upload(oc_cl_device *dev, const oc_weight *w, int to_f32, oc_cl_weight *out, oc_error *err);
void oc_cl_weight_free(oc_cl_weight *w);   /* frees the buffer, zeroes *w; NULL is a no-op */

/* y[t] = x[t] W^T (+ bias) for t < n_tok: rows of n_in floats in, n_out floats out; bias: n_out
 * floats or NULL. GEMV kernel for n_tok <= 4, tiled GEMM above, where F32 weights go through
 * CLBlast SGEMM when the build has it and the device uses it (oc_cl_use_clblast). y must not
 * overlap x. */
oc_status oc_cl_matmul(oc_cl_device *dev, const oc_cl_weight *w, oc_cl_mat x, oc_cl_mat y, int64_t n_tok,
                       const oc_cl_buf *bias, oc_error *err);

/* One token: y += x W^T (+ bias), the sum added to y as oc_cl_add would add the product (a decode
 * step's residual add in the product's epilogue). */
oc_status oc_cl_matmul_acc(oc_cl_device *dev, const oc_cl_weight *w, oc_cl_mat x, oc_cl_mat y, const oc_cl_buf *bias,
                           oc_error *err);

/* Products of one token's x (n_in floats at x.off) with n weights of one type and n_in, in one
 * launch (decode): y[j] = x W_j^T (+ bias[j]) for j < n (n <= OC_CL_FUSED_MAX; q, k and v), or
 * with glu (n == 2, W_0 and W_1 of the same rows: gate and up) y[0] = act(x W_0^T + bias[0]) *
 * (x W_1^T + bias[1]), y[1] unused. bias[j] may be NULL. Each product equals oc_cl_matmul's for
 * one token bit for bit when its rows get as many items. No output may overlap x. norm_w (n_in
 * floats, or NULL): the products of RMSNorm(x) * norm_w (eps) instead, oc_cl_norm's formula with
 * the 1 / rms applied to the sums, inside the launch (x is only read, the norm not written). */
#define OC_CL_FUSED_MAX 3
oc_status oc_cl_matmul_fused(oc_cl_device *dev, int32_t n, const oc_cl_weight *const *w, oc_cl_mat x,
                             const oc_cl_mat *y, const oc_cl_buf *const *bias, int glu, oc_act act,
                             const oc_cl_buf *norm_w, float eps, oc_error *err);

/* ---- embedding, KV cache, sampling ------------------------------------------------------------------ */

/* out row t = table row ids[ids_off + t] (dequantized), t < n_tokens; ids: int32 on the device.
 * Rows with a negative id are left as they are (the caller writes image embeddings there); ids
 * past the table are left too (validate them on the host). */
oc_status oc_cl_embed(oc_cl_device *dev, const oc_cl_weight *table, const oc_cl_buf *ids, int64_t ids_off,
                      int32_t n_tokens, oc_cl_mat out, oc_error *err);
/* Cache row (dst_off / dst_stride + r) = src row r, for r < n_rows, n_cols elements: dst holds
 * dst_dtype (OC_DTYPE_F16: rounded to nearest even, or OC_DTYPE_F32) elements; dst_off and
 * dst_stride count them. */
oc_status oc_cl_kv_store(oc_cl_device *dev, oc_cl_mat src, int32_t n_rows, int64_t n_cols, oc_cl_buf *dst,
                         int32_t dst_dtype, int64_t dst_off, int64_t dst_stride, oc_error *err);
/* out_ids[out_off + r] = argmax of row r of x (n floats), r < n_rows: NaN never wins, ties give
 * the lowest index, an all-NaN row 0 (as src/model/sample.c). */
oc_status oc_cl_argmax(oc_cl_device *dev, oc_cl_mat x, int32_t n_rows, int64_t n, oc_cl_buf *out_ids,
                       int64_t out_off, oc_error *err);

/* ---- benchmarks --------------------------------------------------------------------------------------- */

/* The device's FP32 FMA rate in GFLOP/s from opencl/kernels/peak.cl: best of a few timed runs of about
 * 50 ms each. [alloc: a small device buffer, freed again] */
oc_status oc_cl_fma_peak(oc_cl_device *dev, double *gflops, oc_error *err);
/* The device's read-only bandwidth in GB/s (opencl/kernels/peak.cl oc_read_peak): the best of
 * several runs that each read a zero-filled buffer of n_bytes (capped by the device's
 * single-allocation limit; choose it well above the last-level cache, e.g. 1 GiB on a GPU) four
 * times back to back. [alloc: yes: one device buffer] [errors: OC_ERR_INVALID (below 1 MiB),
 * OC_ERR_DEVICE, OC_ERR_NOMEM] */
oc_status oc_cl_read_peak(oc_cl_device *dev, size_t n_bytes, double *gbps, oc_error *err);

#endif
