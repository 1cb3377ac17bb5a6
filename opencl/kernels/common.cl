/* common.cl: prepended to every program (opencl/cl_device.c): the weight type ids and the loader that
 * turns 8 consecutive elements of a GGUF weight row into f32. f16 is touched only through
 * vload_half (core OpenCL 1.2: no cl_khr_fp16 needed); block layouts as src/kernels/quant.h states them:
 *   Q8_0: 34 bytes = f16 d, 32 x int8 q;          x[j] = q[j] * d
 *   Q4_0: 18 bytes = f16 d, 16 bytes of nibbles;  x[j] = (lo(qs[j]) - 8) * d, x[j+16] = (hi(qs[j]) - 8) * d */
#define OC_DT_F32 0
#define OC_DT_F16 1
#define OC_DT_Q4_0 2
#define OC_DT_Q8_0 8

/* Elements k0 .. k0+7 of a row of n_in elements (k0 a multiple of 8); elements past n_in are 0.
 * Quantized rows hold whole blocks, so only F32 and F16 rows can end inside the 8. Pointer
 * arithmetic is done on bytes: some compilers refuse it on half pointers without cl_khr_fp16. */
inline float8 oc_load8(int dtype, const __global uchar *row, int k0, int n_in) {
    if (dtype == OC_DT_Q8_0) {
        const __global uchar *blk = row + (size_t)(k0 >> 5) * 34;
        float d = vload_half(0, (const __global half *)blk);
        return convert_float8(vload8(0, (const __global char *)(blk + 2 + (k0 & 31)))) * d;
    }
    if (dtype == OC_DT_Q4_0) {
        const __global uchar *blk = row + (size_t)(k0 >> 5) * 18;
        float d = vload_half(0, (const __global half *)blk);
        int sub = k0 & 31;
        uchar8 q = vload8(0, blk + 2 + (sub & 15));
        q = sub < 16 ? (q & (uchar8)15) : (q >> (uchar8)4);
        return (convert_float8(q) - 8.0f) * d;
    }
    if (k0 + 8 <= n_in) {
        if (dtype == OC_DT_F16) return vload_half8(0, (const __global half *)(row + 2 * (size_t)k0));
        return vload8(0, (const __global float *)row + k0);
    }
    float v[8];
    for (int e = 0; e < 8; e++) {
        int k = k0 + e;
        v[e] = k >= n_in ? 0.0f
             : dtype == OC_DT_F16 ? vload_half(k, (const __global half *)row) : ((const __global float *)row)[k];
    }
    return (float8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

/* Elements k0 .. k0+7 of an f32 row of n elements; past n: 0. */
inline float8 oc_load8_f32(const __global float *x, int k0, int n) {
    if (k0 + 8 <= n) return vload8(0, x + k0);
    float v[8];
    for (int e = 0; e < 8; e++) v[e] = k0 + e < n ? x[k0 + e] : 0.0f;
    return (float8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

/* Activations (src/kernels/nn.h oc_act: SiLU, GELU with erf, QuickGELU), for elementwise.cl and the
 * fused gate/up product of matmul.cl. */
#define OC_ACT_SILU 0
#define OC_ACT_GELU_ERF 1
#define OC_ACT_GELU_QUICK 2

inline float oc_act_eval(float x, int act) {
    if (act == OC_ACT_GELU_ERF) return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));
    if (act == OC_ACT_GELU_QUICK) return x / (1.0f + exp(-1.702f * x));
    return x / (1.0f + exp(-x));
}
