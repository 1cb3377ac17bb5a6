/* norm.cl: RMSNorm and LayerNorm of rows (definitions: src/nn.h, Qwen2RMSNorm and torch LayerNorm
 * with biased variance, f32 throughout). One work-group per row; its size is a power of two. The
 * row sums go through a local-memory tree, or through sub-group reductions when the device has
 * them (OC_HAVE_SUBGROUPS, set by the host from the extension list). y may alias x: every item
 * reads its own elements before the reduction's barriers and writes them after. */
#if OC_HAVE_SUBGROUPS && defined(cl_khr_subgroups)
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#endif

/* The sum of v over the work-group, returned to every item; red holds one float per item. */
inline float oc_wg_sum(float v, __local float *red) {
    int lid = get_local_id(0);
#if OC_HAVE_SUBGROUPS
    float s = sub_group_reduce_add(v);
    if (get_sub_group_local_id() == 0) red[get_sub_group_id()] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    float t = 0.0f;
    for (int i = 0; i < (int)get_num_sub_groups(); i++) t += red[i];   /* fixed order: deterministic */
#else
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = (int)get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float t = red[0];
#endif
    barrier(CLK_LOCAL_MEM_FENCE);   /* red may be reused right after */
    return t;
}

/* y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w   (has_w 0: no w) */
__kernel void oc_rms_norm(__global float *y, int y_off, int y_stride, const __global float *x, int x_off,
                          int x_stride, const __global float *w, int has_w, int n, float eps,
                          __local float *red) {
    int lid = get_local_id(0), nl = get_local_size(0);
    const __global float *xr = x + x_off + (size_t)get_group_id(0) * x_stride;
    __global float *yr = y + y_off + (size_t)get_group_id(0) * y_stride;
    float ss = 0.0f;
    for (int i = lid; i < n; i += nl) ss = fma(xr[i], xr[i], ss);
    ss = oc_wg_sum(ss, red);
    float r = 1.0f / sqrt(ss / (float)n + eps);
    for (int i = lid; i < n; i += nl) yr[i] = has_w ? w[i] * (xr[i] * r) : xr[i] * r;
}

/* y[r] = (x[r] - mean) / sqrt(var + eps) * w + b   (has_w / has_b 0: no w / b) */
__kernel void oc_layer_norm(__global float *y, int y_off, int y_stride, const __global float *x, int x_off,
                            int x_stride, const __global float *w, int has_w, const __global float *b,
                            int has_b, int n, float eps, __local float *red) {
    int lid = get_local_id(0), nl = get_local_size(0);
    const __global float *xr = x + x_off + (size_t)get_group_id(0) * x_stride;
    __global float *yr = y + y_off + (size_t)get_group_id(0) * y_stride;
    float s = 0.0f;
    for (int i = lid; i < n; i += nl) s += xr[i];
    float mean = oc_wg_sum(s, red) / (float)n;
    float v = 0.0f;
    for (int i = lid; i < n; i += nl) {
        float d = xr[i] - mean;
        v = fma(d, d, v);
    }
    float r = 1.0f / sqrt(oc_wg_sum(v, red) / (float)n + eps);
    for (int i = lid; i < n; i += nl) {
        float o = (xr[i] - mean) * r;
        if (has_w) o *= w[i];
        if (has_b) o += b[i];
        yr[i] = o;
    }
}
