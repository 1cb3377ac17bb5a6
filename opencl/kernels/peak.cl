/* peak.cl: the FP32 FMA roof of the device for the benchmarks: 32 independent fma chains per item
 * as four float8 (GPUs run them as 32 scalar chains, plenty to hide the FMA latency; PoCL does not
 * vectorise loops inside a work-item across items, so explicit 8-wide vectors are what reach its
 * AVX units), n_iter rounds of 4. FLOPs = 2 * 32 * 4 * n_iter per item. The sum is stored so
 * nothing is optimised away. */
__kernel void oc_fma_peak(__global float *out, float a, float b, int n_iter) {
    float8 x0 = (float8)((float)get_global_id(0) * 1e-7f) + (float8)(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
    float8 x1 = x0 + 8.0f, x2 = x0 + 16.0f, x3 = x0 + 24.0f;
    float8 va = (float8)a, vb = (float8)b;
    for (int it = 0; it < n_iter; it++) {
        for (int u = 0; u < 4; u++) {
            x0 = fma(x0, va, vb);
            x1 = fma(x1, va, vb);
            x2 = fma(x2, va, vb);
            x3 = fma(x3, va, vb);
        }
    }
    float8 s = x0 + x1 + x2 + x3;
    float4 h = s.lo + s.hi;
    out[get_global_id(0)] = h.x + h.y + h.z + h.w;
}

/* The read-only bandwidth roof (as a decode step reads its weights): item i sums the float4s i,
 * i + grid, ... of x (n_vec4 in all), so each step of the grid reads one contiguous stretch. The
 * sum is stored only when it is -1, which the caller's zero-filled buffer never gives: nothing is
 * written, and nothing can be optimised away. */
__kernel void oc_read_peak(__global float *out, const __global float4 *x, int n_vec4) {
    float4 s = (float4)(0.0f);
    for (int i = (int)get_global_id(0); i < n_vec4; i += (int)get_global_size(0)) s += x[i];
    float t = s.x + s.y + s.z + s.w;
    if (t == -1.0f) out[0] = t;
}
