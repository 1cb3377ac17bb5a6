/* cl_matmul.c: weights on the device and y = x W^T (cl_ops.h). Which path a product takes:
 *  - F32 weights, more than GEMV_MAX_TOK tokens, CLBlast in the build and enabled on the device:
 *    CLBlastSgemm (row-major x, W transposed), then the bias through opencl/kernels/elementwise.cl (for
 *    one token CLBlast's padded GEMM was 7x slower than oc_gemv on PoCL);
 *  - otherwise opencl/kernels/matmul.cl: oc_gemv for up to GEMV_MAX_TOK tokens, oc_gemm (64 x 64 tiles)
 *    above, both decoding F32 / F16 / Q8_0 / Q4_0 rows with the same loader.
 * Weights keep their GGUF row layout on the device (rows padded to 4 bytes when needed). */
#include "opencl/cl_internal.h"
#include "opencl/cl_ops.h"
#include "core/dtype.h"
#include "kernels/quant.h"

#include <string.h>

#if OC_HAVE_CLBLAST
#include <clblast_c.h>
#endif

#define GEMV_MAX_TOK 4
#define GEMV_ROW_ITEMS 32   /* items along one output row */
#define GEMV_WG 128
#define GEMV_GPU_ITEMS 2048   /* a launch's items per compute unit wanted on a GPU (decode GEMV) */
#define GEMV_CPU_ITEMS 64
#define GEMV_MIN_CHUNKS 4     /* chunks of 8 each item keeps at least, when rows get more items */
#define GEMM_TILE 64
#define STAGE_FLOATS (1 << 20)   /* host staging for dequantize-at-upload: 4 MiB */

int oc_cl_weight_type_ok(int32_t dtype) {
    return dtype == OC_DTYPE_F32 || dtype == OC_DTYPE_F16 || dtype == OC_DTYPE_Q8_0 || dtype == OC_DTYPE_Q4_0;
}

void oc_cl_weight_free(oc_cl_weight *w) {
    if (!w) return;
    oc_cl_buf_free(w->buf);
    memset(w, 0, sizeof *w);
}

/* Dequantize rows on the host in blocks of STAGE_FLOATS and upload them as F32. */
static oc_status upload_f32(oc_cl_device *dev, const oc_weight *w, oc_cl_weight *out, oc_error *err) {
    oc_to_f32_fn to_f32 = oc_dequant_ref(w->dtype);
    if (!to_f32) return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl: no dequantizer for %s weights", oc_dtype_name(w->dtype));
    int64_t rows_per = OC_MAX((int64_t)1, STAGE_FLOATS / w->n_in);
    size_t stage_bytes = (size_t)(rows_per * w->n_in) * sizeof(float);
    float *stage = oc_mem_alloc(dev->alloc, stage_bytes);
    if (!stage) return oc_fail(err, OC_ERR_NOMEM, "opencl: out of memory staging a weight");
    oc_status st = OC_OK;
    for (int64_t r0 = 0; r0 < w->n_out && st == OC_OK; r0 += rows_per) {
        int64_t n = OC_MIN(rows_per, w->n_out - r0);
        for (int64_t r = 0; r < n; r++)
            to_f32((const unsigned char *)w->data + (size_t)(r0 + r) * w->row_bytes, stage + r * w->n_in, w->n_in);
        st = oc_cl_upload(dev, out->buf, (size_t)(r0 * w->n_in) * sizeof(float), stage,
                          (size_t)(n * w->n_in) * sizeof(float), err);
    }
    oc_mem_free(dev->alloc, stage, stage_bytes);
    return st;
}

oc_status oc_cl_weight_upload(oc_cl_device *dev, const oc_weight *w, int to_f32, oc_cl_weight *out, oc_error *err) {
    memset(out, 0, sizeof *out);
    if (!w || !w->data || w->n_in < 1 || w->n_out < 1 || w->n_in > INT32_MAX || w->n_out > INT32_MAX)
        return oc_fail(err, OC_ERR_INVALID, "opencl: weight without data or with a bad shape");
    uint64_t row = oc_dtype_row_bytes(w->dtype, (uint64_t)w->n_in);
    if (!row || w->row_bytes < row)
        return oc_fail(err, OC_ERR_INVALID, "opencl: %s weight rows of %lld elements in %zu bytes", oc_dtype_name(w->dtype),
                       (long long)w->n_in, w->row_bytes);
    if (!to_f32 && !oc_cl_weight_type_ok(w->dtype))
        return oc_fail(err, OC_ERR_UNSUPPORTED, "opencl: the kernels take F32, F16, Q8_0 and Q4_0 weights, not %s "
                       "(upload it as f32)", oc_dtype_name(w->dtype));
    out->dtype = to_f32 ? OC_DTYPE_F32 : w->dtype;
    out->n_in = w->n_in;
    out->n_out = w->n_out;
    out->row_bytes = to_f32 ? w->n_in * 4 : (int64_t)((row + 3) / 4 * 4);   /* 4-byte rows: vector loads */
    size_t total;
    if (out->row_bytes > INT32_MAX || !oc_mul_size((size_t)out->row_bytes, (size_t)w->n_out, &total))
        return oc_fail(err, OC_ERR_RANGE, "opencl: weight of %lld x %lld is too large", (long long)w->n_out,
                       (long long)w->n_in);
    oc_status st = oc_cl_buf_alloc(dev, total, &out->buf, err);
    if (st != OC_OK) return st;
    if (to_f32) {
        st = upload_f32(dev, w, out, err);
    } else if ((size_t)out->row_bytes == w->row_bytes) {
        st = oc_cl_upload(dev, out->buf, 0, w->data, total, err);
    } else {   /* rows padded or strided: one upload per row (load time only) */
        for (int64_t r = 0; r < w->n_out && st == OC_OK; r++)
            st = oc_cl_upload(dev, out->buf, (size_t)(r * out->row_bytes),
                              (const unsigned char *)w->data + (size_t)r * w->row_bytes, (size_t)row, err);
    }
    if (st != OC_OK) oc_cl_weight_free(out);
    return st;
}

/* ---- products ------------------------------------------------------------------------------------------------ */

static int view_fits(oc_cl_mat m, int64_t n_rows, int64_t n) {
    if (!m.buf || m.off < 0 || (n_rows > 1 && m.stride < n) || m.stride > INT32_MAX) return 0;
    int64_t last = (n_rows - 1) * m.stride + n;
    return oc_cl_fits_i32(m.off, last) && (uint64_t)(m.off + last) <= oc_cl_buf_bytes(m.buf) / sizeof(float);
}

#if OC_HAVE_CLBLAST
static oc_status clblast_sgemm(oc_cl_device *dev, const oc_cl_weight *w, oc_cl_mat x, oc_cl_mat y, int64_t n_tok,
                               const oc_cl_buf *bias, oc_error *err) {
    size_t ldx = (size_t)OC_MAX(x.stride, w->n_in), ldy = (size_t)OC_MAX(y.stride, w->n_out);
    oc_cl_prof_batch(dev);
    dev->clblast_ran = 1;
    CLBlastStatusCode rc = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, (size_t)n_tok,
                                        (size_t)w->n_out, (size_t)w->n_in, 1.0f, x.buf->mem, (size_t)x.off, ldx,
                                        w->buf->mem, 0, (size_t)(w->row_bytes / 4), 0.0f, y.buf->mem, (size_t)y.off,
                                        ldy, &dev->queue, NULL);
    if (rc != CLBlastSuccess)
        return oc_fail(err, OC_ERR_DEVICE, "opencl: CLBlastSgemm %lld x %lld x %lld failed with status %d",
                       (long long)n_tok, (long long)w->n_out, (long long)w->n_in, (int)rc);
    if (!bias) return OC_OK;
    size_t global[2] = { (size_t)w->n_out, (size_t)n_tok };
    oc_cl_arg a[] = { OC_CL_BUF(y.buf), OC_CL_I32(y.off), OC_CL_I32(ldy), OC_CL_BUF(bias), OC_CL_I32(w->n_out),
                      OC_CL_I32(n_tok) };
    return oc_cl_launch(dev, OC_CLK_ADD_BIAS, 2, global, NULL, (int)OC_ARRAY_LEN(a), a, err);
}
#endif

/* CLBlast keeps every program it builds in a process-wide cache keyed by context, and a cached
 * program holds its context: without this, a closed context stayed alive (with its device
 * memory and the driver's state) until the process ended, and a process that opened contexts
 * one after another (calibration's validations) ran out: NVIDIA's clCreateContext answered
 * CL_OUT_OF_HOST_MEMORY after about 100. CLBlast can only drop the whole cache, so other open
 * contexts rebuild their CLBlast programs on their next product (time, not results). */
void oc_cl_matmul_close(oc_cl_device *dev) {
#if OC_HAVE_CLBLAST
    if (dev->clblast_ran) CLBlastClearCache();
#endif
    dev->clblast_ran = 0;
}

static void gemv_shape(oc_cl_device *dev, oc_cl_kernel_id id, int32_t dtype, int64_t n_rows, int64_t n_in, size_t local[2]);

static oc_status matmul(oc_cl_device *dev, const oc_cl_weight *w, oc_cl_mat x, oc_cl_mat y, int64_t n_tok,
                       const oc_cl_buf *bias, int acc, oc_error *err) {
    if (!w || !w->buf || !oc_cl_weight_type_ok(w->dtype))
        return oc_fail(err, OC_ERR_INVALID, "opencl matmul: no weight, or a type the kernels do not take");
    if (n_tok < 1 || n_tok > INT32_MAX) return oc_fail(err, OC_ERR_INVALID, "opencl matmul: %lld tokens", (long long)n_tok);
    if (!view_fits(x, n_tok, w->n_in) || !view_fits(y, n_tok, w->n_out))
        return oc_fail(err, OC_ERR_RANGE, "opencl matmul: x (%lld x %lld) or y (%lld x %lld) does not fit its buffer",
                       (long long)n_tok, (long long)w->n_in, (long long)n_tok, (long long)w->n_out);
    if (bias && oc_cl_buf_bytes(bias) < (size_t)w->n_out * sizeof(float))
        return oc_fail(err, OC_ERR_RANGE, "opencl matmul: bias shorter than %lld floats", (long long)w->n_out);
    if (x.buf == y.buf && x.off < y.off + n_tok * OC_MAX(y.stride, w->n_out) && y.off < x.off + n_tok * OC_MAX(x.stride, w->n_in))
        return oc_fail(err, OC_ERR_INVALID, "opencl matmul: y overlaps x");
#if OC_HAVE_CLBLAST
    if (dev->use_clblast && w->dtype == OC_DTYPE_F32 && n_tok > GEMV_MAX_TOK)
        return clblast_sgemm(dev, w, x, y, n_tok, bias, err);
#endif
    oc_cl_arg a[] = { OC_CL_BUF(y.buf), OC_CL_I32(y.off), OC_CL_I32(y.stride), OC_CL_BUF(x.buf), OC_CL_I32(x.off),
                      OC_CL_I32(x.stride), OC_CL_BUF(w->buf), OC_CL_I32(w->dtype), OC_CL_I32(w->row_bytes),
                      OC_CL_I32(w->n_in), OC_CL_I32(w->n_out), OC_CL_BUF(bias), OC_CL_I32(bias != NULL),
                      OC_CL_I32(n_tok), OC_CL_I32(acc), OC_CL_LOCAL(0) };
    int n_args = (int)OC_ARRAY_LEN(a);
    if (n_tok > GEMV_MAX_TOK && oc_cl_kernel_wg_size(dev, OC_CLK_GEMM) >= 256) {
        size_t local[2] = { 16, 16 };
        size_t global[2] = { (size_t)(w->n_out + GEMM_TILE - 1) / GEMM_TILE * 16,
                             (size_t)(n_tok + GEMM_TILE - 1) / GEMM_TILE * 16 };
        return oc_cl_launch(dev, OC_CLK_GEMM, 2, global, local, n_args - 2, a, err);   /* no acc, no local */
    }
    size_t local[2];
    gemv_shape(dev, OC_CLK_GEMV, w->dtype, w->n_out, w->n_in, local);
    size_t global[2] = { local[0], (size_t)w->n_out };
    a[n_args - 1] = OC_CL_LOCAL(local[0] * local[1] * 4 * sizeof(float));
    return oc_cl_launch(dev, OC_CLK_GEMV, 2, global, local, n_args, a, err);
}

oc_status oc_cl_matmul(oc_cl_device *dev, const oc_cl_weight *w, oc_cl_mat x, oc_cl_mat y, int64_t n_tok,
                       const oc_cl_buf *bias, oc_error *err) {
    return matmul(dev, w, x, y, n_tok, bias, 0, err);
}

oc_status oc_cl_matmul_acc(oc_cl_device *dev, const oc_cl_weight *w, oc_cl_mat x, oc_cl_mat y, const oc_cl_buf *bias,
                           oc_error *err) {
    return matmul(dev, w, x, y, 1, bias, 1, err);
}

/* The row products (weight products, fused or not) of one token: local[0] items per row, local[1]
 * rows per work-group (kernel id's limit). */
static void gemv_shape(oc_cl_device *dev, oc_cl_kernel_id id, int32_t dtype, int64_t n_rows, int64_t n_in,
                       size_t local[2]) {
    size_t wg = oc_cl_pow2_wg(dev, id, GEMV_WG), t = oc_cl_pow2_wg(dev, id, GEMV_ROW_ITEMS);
    /* A few long rows (the MLP's down projection: 1,536 rows of 8,960) leave too few items to keep
     * enough loads in flight to cover the memory's latency: widen each row's share of items until the
     * launch has GEMV_GPU_ITEMS per compute unit on a GPU (GEMV_CPU_ITEMS on others), while every item
     * keeps at least GEMV_MIN_CHUNKS chunks of 8 of its row. Q8_0 rows go by blocks of 32
     * (matmul.cl oc_q8dot_block), so there a "chunk" is half a block: two blocks per item at least
     * (64 items per row for the 8,960-wide down projection, which read 530-590 GB/s on the H200
     * this way, 480 with the chunk loop). */
    size_t want = (size_t)OC_MAX(dev->caps.compute_units, 1u) * (dev->caps.is_gpu ? GEMV_GPU_ITEMS : GEMV_CPU_ITEMS);
    size_t n8 = dtype == OC_DTYPE_Q8_0 ? (size_t)n_in / 16 : (size_t)(n_in + 7) / 8;
    while (t * 2 <= wg && (size_t)n_rows * t < want && n8 >= t * 2 * GEMV_MIN_CHUNKS) t *= 2;
    local[0] = t;
    local[1] = OC_MAX((size_t)1, wg / t);
}

oc_status oc_cl_matmul_fused(oc_cl_device *dev, int32_t n, const oc_cl_weight *const *w, oc_cl_mat x,
                             const oc_cl_mat *y, const oc_cl_buf *const *bias, int glu, oc_act act,
                             const oc_cl_buf *norm_w, float eps, oc_error *err) {
    if (n < 1 || n > OC_CL_FUSED_MAX || (glu && n != 2))
        return oc_fail(err, OC_ERR_INVALID, "opencl fused matmul: %d products%s", (int)n, glu ? " for a gated unit" : "");
    if (w[0] && norm_w && oc_cl_buf_bytes(norm_w) < (size_t)w[0]->n_in * sizeof(float))
        return oc_fail(err, OC_ERR_RANGE, "opencl fused matmul: norm weight shorter than %lld floats",
                       (long long)w[0]->n_in);
    int64_t rows = 0;
    for (int32_t j = 0; j < n; j++) {
        if (!w[j] || !w[j]->buf || !oc_cl_weight_type_ok(w[j]->dtype) || w[j]->dtype != w[0]->dtype ||
            w[j]->n_in != w[0]->n_in)
            return oc_fail(err, OC_ERR_INVALID, "opencl fused matmul: product %d has no weight, or not the first's type "
                           "and input width", (int)j);
        if (glu && w[j]->n_out != w[0]->n_out)
            return oc_fail(err, OC_ERR_INVALID, "opencl fused matmul: gate and up of %lld and %lld rows",
                           (long long)w[0]->n_out, (long long)w[j]->n_out);
        int64_t n_out = glu ? w[0]->n_out : w[j]->n_out;
        if (!view_fits(x, 1, w[j]->n_in) || ((!glu || j == 0) && !view_fits(y[j], 1, n_out)))
            return oc_fail(err, OC_ERR_RANGE, "opencl fused matmul: x (%lld) or output %d (%lld) does not fit its buffer",
                           (long long)w[j]->n_in, (int)j, (long long)n_out);
        if (bias[j] && oc_cl_buf_bytes(bias[j]) < (size_t)w[j]->n_out * sizeof(float))
            return oc_fail(err, OC_ERR_RANGE, "opencl fused matmul: bias %d shorter than %lld floats", (int)j,
                           (long long)w[j]->n_out);
        if ((!glu || j == 0) && x.buf == y[j].buf && x.off < y[j].off + n_out && y[j].off < x.off + w[j]->n_in)
            return oc_fail(err, OC_ERR_INVALID, "opencl fused matmul: output %d overlaps x", (int)j);
        rows += glu ? 0 : w[j]->n_out;
    }
    if (glu) rows = w[0]->n_out;
    if (rows > INT32_MAX) return oc_fail(err, OC_ERR_RANGE, "opencl fused matmul: %lld rows", (long long)rows);
    oc_cl_arg a[5 + 7 * OC_CL_FUSED_MAX + 4] = { OC_CL_BUF(x.buf), OC_CL_I32(x.off), OC_CL_I32(w[0]->dtype),
                                                OC_CL_I32(w[0]->n_in), OC_CL_I32(glu ? (int32_t)act : -1) };
    int k = 5;
    for (int32_t j = 0; j < OC_CL_FUSED_MAX; j++) {
        int on = j < n;
        a[k++] = OC_CL_BUF(on ? w[j]->buf : w[0]->buf);
        a[k++] = OC_CL_I32(on ? w[j]->row_bytes : w[0]->row_bytes);
        a[k++] = OC_CL_I32(on ? w[j]->n_out : 0);
        a[k++] = OC_CL_BUF(on && (!glu || j == 0) ? y[j].buf : y[0].buf);
        a[k++] = OC_CL_I32(on && (!glu || j == 0) ? y[j].off : y[0].off);
        a[k++] = OC_CL_BUF(on ? bias[j] : NULL);
        a[k++] = OC_CL_I32(on && bias[j] != NULL);
    }
    size_t local[2];
    gemv_shape(dev, OC_CLK_GEMV_FUSED, w[0]->dtype, glu ? w[0]->n_out : rows, w[0]->n_in, local);
    size_t global[2] = { local[0], (size_t)rows };
    a[k++] = OC_CL_BUF(norm_w);
    a[k++] = OC_CL_I32(norm_w != NULL);
    a[k++] = OC_CL_F32(eps);
    a[k++] = OC_CL_LOCAL(local[0] * local[1] * 3 * sizeof(float));
    return oc_cl_launch(dev, OC_CLK_GEMV_FUSED, 2, global, local, k, a, err);
}
