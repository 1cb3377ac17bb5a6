/* peak.cl: the FP32 FMA roof of the device for the benchmarks: 16 independent fma chains per item
 * (four float4: enough to hide the FMA latency on GPUs; PoCL maps them onto its vector units),
 * n_iter rounds of 4. FLOPs = 2 * 16 * 4 * n_iter per item. The sum is stored so nothing is
 * optimised away. */
__kernel void oc_fma_peak(__global float *out, float a, float b, int n_iter) {
    float4 x0 = (float4)((float)get_global_id(0) * 1e-7f) + (float4)(0.0f, 1.0f, 2.0f, 3.0f);
    float4 x1 = x0 + 4.0f, x2 = x0 + 8.0f, x3 = x0 + 12.0f;
    float4 va = (float4)a, vb = (float4)b;
    for (int it = 0; it < n_iter; it++) {
        for (int u = 0; u < 4; u++) {
            x0 = fma(x0, va, vb);
            x1 = fma(x1, va, vb);
            x2 = fma(x2, va, vb);
            x3 = fma(x3, va, vb);
        }
    }
    float4 s = x0 + x1 + x2 + x3;
    out[get_global_id(0)] = s.x + s.y + s.z + s.w;
}
