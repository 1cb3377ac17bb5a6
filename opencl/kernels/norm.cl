/* norm.cl: RMSNorm and LayerNorm of rows (definitions: src/kernels/nn.h, Qwen2RMSNorm and torch LayerNorm
 * with biased variance, f32 throughout), with the residual add before them fused in:
 *   x[r] += res[r] (when has_res); then y[r] = norm(x[r]) * w (+ b) (when has_y).
 * One work-group per row; its size is a power of two. The row sums go through a local-memory
 * tree, or through sub-group reductions when the device has them (OC_HAVE_SUBGROUPS, set by the
 * host from the extension list). Every item touches the same elements (lid, lid + size, ...) in
 * each pass and reads its own elements before the reduction's barriers, so y may be x or res. */
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

/* Elements an item keeps in registers (lid, lid + size, ...): rows up to OC_NORM_REG times the
 * work-group's size (1,536 with 256 items: a decode step's rows) are read from memory once and
 * written once, instead of a chain of four passes over global memory (x + res stored, then
 * reloaded for each sum and for the output): the per-row kernel is one work-group, so its time is
 * that chain's latency (8.3 us a row on the H200 before). */
#define OC_NORM_REG 8

__kernel void oc_norm(int layer, __global float *y, int y_off, int y_stride, int has_y, __global float *x, int x_off,
                      int x_stride, const __global float *res, int res_off, int res_stride, int has_res,
                      const __global float *w, int has_w, const __global float *b, int has_b, int n, float eps,
                      __local float *red) {
    int lid = get_local_id(0), nl = get_local_size(0), row = get_group_id(0);
    __global float *xr = x + x_off + (size_t)row * x_stride;
    __global float *yr = y + y_off + (size_t)row * y_stride;
    if (n <= OC_NORM_REG * nl) {   /* uniform: the row in registers */
        float v[OC_NORM_REG];
        const __global float *rr = res + res_off + (size_t)row * res_stride;
        for (int j = 0; j < OC_NORM_REG; j++) {
            int i = lid + j * nl;
            v[j] = i >= n ? 0.0f : has_res ? xr[i] + rr[i] : xr[i];
        }
        if (has_res)
            for (int j = 0; j < OC_NORM_REG; j++)
                if (lid + j * nl < n) xr[lid + j * nl] = v[j];
        float mean = 0.0f;
        if (layer) {
            float s = 0.0f;
            for (int j = 0; j < OC_NORM_REG; j++) s += v[j];
            mean = oc_wg_sum(s, red) / (float)n;
        }
        float ss = 0.0f;
        for (int j = 0; j < OC_NORM_REG; j++) {
            float d = lid + j * nl < n ? v[j] - mean : 0.0f;
            ss = fma(d, d, ss);
        }
        float r = 1.0f / sqrt(oc_wg_sum(ss, red) / (float)n + eps);
        for (int j = 0; j < OC_NORM_REG; j++) {
            int i = lid + j * nl;
            if (!has_y || i >= n) continue;
            float o = (v[j] - mean) * r;
            if (has_w) o *= w[i];
            if (has_b) o += b[i];
            yr[i] = o;
        }
        return;
    }
    if (has_res) {
        const __global float *rr = res + res_off + (size_t)row * res_stride;
        for (int i = lid; i < n; i += nl) xr[i] += rr[i];
    }
    /* no early return without y: every item must reach the barriers of the sums (some compilers
     * mishandle a barrier after a return, uniform or not); the sums are cheap, the stores skipped */
    float mean = 0.0f;
    if (layer) {
        float s = 0.0f;
        for (int i = lid; i < n; i += nl) s += xr[i];
        mean = oc_wg_sum(s, red) / (float)n;
    }
    float ss = 0.0f;
    for (int i = lid; i < n; i += nl) {
        float d = xr[i] - mean;
        ss = fma(d, d, ss);
    }
    float r = 1.0f / sqrt(oc_wg_sum(ss, red) / (float)n + eps);
    for (int i = lid; has_y && i < n; i += nl) {
        float o = (xr[i] - mean) * r;
        if (has_w) o *= w[i];
        if (has_b) o += b[i];
        yr[i] = o;
    }
}
