/* argmax.cl: the index of the largest logit of each row (greedy sampling on the device, so only
 * one int per row comes back). Same rule as src/model/sample.c: NaN never wins, ties go to the lowest
 * index, a row of only NaN gives 0. One work-group (a power of two) per row. */
inline int oc_better(float a, int ia, float b, int ib) {   /* is (a, ia) ahead of (b, ib)? */
    if (ia < 0) return 0;
    if (ib < 0) return 1;
    return a > b || (a == b && ia < ib);
}

__kernel void oc_argmax(__global int *out, int out_off, const __global float *x, int x_off, int x_stride, int n,
                        __local float *rv, __local int *ri) {
    int lid = get_local_id(0), nl = get_local_size(0), row = get_group_id(0);
    const __global float *xr = x + x_off + (size_t)row * x_stride;
    float best = 0.0f;
    int bi = -1;
    for (int i = lid; i < n; i += nl) {
        float v = xr[i];
        if (v == v && (bi < 0 || v > best)) { best = v; bi = i; }
    }
    rv[lid] = best;
    ri[lid] = bi;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = nl / 2; s > 0; s >>= 1) {
        if (lid < s && oc_better(rv[lid + s], ri[lid + s], rv[lid], ri[lid])) {
            rv[lid] = rv[lid + s];
            ri[lid] = ri[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[out_off + row] = ri[0] < 0 ? 0 : ri[0];
}
