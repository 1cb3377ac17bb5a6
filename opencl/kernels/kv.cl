/* kv.cl: store f32 rows (new K or V of n_rows tokens) into a KV cache at a token offset, as f16
 * (vstore_half_rte: round to nearest even, as src/core/f16.h) or f32. Offsets and strides are in
 * elements of the cache's type. */
__kernel void oc_kv_store(__global uchar *dst, int dst_f16, int dst_off, int dst_stride, const __global float *src,
                          int src_off, int src_stride, int n_cols, int n_rows) {
    int c = get_global_id(0), r = get_global_id(1);
    if (c >= n_cols || r >= n_rows) return;
    float v = src[src_off + (size_t)r * src_stride + c];
    size_t at = (size_t)dst_off + (size_t)r * dst_stride + c;
    if (dst_f16) vstore_half_rte(v, at, (__global half *)dst);
    else ((__global float *)dst)[at] = v;
}
